"""Prefect tasks: thin wrappers around the engine (`das`) that add retries, logging, artifacts."""
