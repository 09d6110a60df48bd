"""Layer 3, runs: one experiment from a config to a run folder (runner, identity, checkpoints,
results, locks, tracking, pre-run checks, Flower).

Imports the layers below (top level, federation, evaluation) and `data`, never a layer above."""
