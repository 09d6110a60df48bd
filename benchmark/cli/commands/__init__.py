"""Subcommands of `fedbench`, one module each (discovered by `benchmark.cli`)."""
