"""Exact noise, distribution math, privacy accounting and budget calculators."""
