"""The toy world: a generated compositional image world and a small CLIP pretrained on it.

Importing this package registers the checkpoint providers `fedbench-toy` (backbone
`fedbench-toy-vit`) and `fedbench-toy-test` (the same backbone, briefly pretrained) with
`benchmark.backbone`; both hand out the checkpoints shipped in `data/toy/checkpoints/`.
`python -m data.toy.calibrate` prints how much room the datasets leave to adaptation. The datasets register via `data.toy.datasets` (discovered by
`data.catalog`, a built-in beside `data.loaders`).
"""

from data.toy import pretrain  # noqa: F401  (registers the pretrained providers)
