"""Typed loaders for the public specification files and run configs (production formats): the
foundation every product parses its parameters with."""
