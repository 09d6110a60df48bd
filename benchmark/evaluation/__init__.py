"""Layer 2, evaluation: accuracy over class sets, the protocols, and the per-client evaluation.

Imports the top level, `data` and `benchmark.federation`, never a layer above."""
