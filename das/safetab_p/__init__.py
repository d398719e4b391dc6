"""SafeTab-P (Detailed DHC-A): population groups, two-stage adaptive measurement, T1/T2 tables."""
