"""PHSafe (S-DHC): truncate-and-join household tables PH1–PH8 and their measurement plan."""
