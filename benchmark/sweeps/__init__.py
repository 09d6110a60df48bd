"""Layer 4, sweeps: presets expanded into cells, their executors, tuning, tables and figures.

Imports every layer below, never `benchmark.cli`."""
