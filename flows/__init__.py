"""Prefect flows: the entrypoints of deployments and of `das run`."""
