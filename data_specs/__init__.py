"""Marks this folder as the package data ``das.resources.data_specs`` (mapped in setup.py):
the specs are found through :func:`das.resources.data_specs_dir`, in a checkout and in a
wheel alike. No code lives here."""
