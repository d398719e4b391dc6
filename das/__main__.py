import sys

from das.cli import main

sys.exit(main())
