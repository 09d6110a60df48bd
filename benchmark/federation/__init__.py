"""Layer 1, federation: the simulator, the client loop, the frozen-feature cache and the bare loop.

Imports the top level of `benchmark` (the plugin contract) and `data`, never a layer above."""
