"""Budget reports of the products' configs: above the products, beside the CLI and the explorer."""
