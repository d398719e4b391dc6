"""Marks this folder as the package data ``das.resources.expectations`` (mapped in setup.py):
the suites are found through :func:`das.resources.expectations_dir`, in a checkout and in a
wheel alike. No code lives here."""
