"""Stand-alone measurement scripts (``python -m contenox_bench.scripts.<name>``)."""
