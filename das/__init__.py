"""DAS: disclosure avoidance for detailed census tables (engine; never imports Prefect)."""

from das.cpython_workarounds import serialize_ast_parsing

# Every process that runs the pipeline's code imports this package first (flow runs, Dask
# workers, the CLI), and task threads parse .npy headers concurrently: see the module.
serialize_ast_parsing()
