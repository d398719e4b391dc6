"""Paths and names shared by the tests of the demo spec set."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO_SPECS = REPO / "data_specs" / "safetab_p" / "demo"
# The LEVEL-0 "alone" iterations of the six major race groups, in CENRACE bit order.
GROUP_NAMES = (
    "White alone",
    "Black or African American alone",
    "American Indian and Alaska Native alone",
    "Asian alone",
    "Native Hawaiian and Other Pacific Islander alone",
    "Some Other Race alone",
)
