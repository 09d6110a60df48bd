"""The built-in dataset loaders, one module per family of layouts (and helpers they share:
`image_folders`, `split_zhou`). Each registers its datasets with `@register_dataset`
(`data.registry`) when imported; `data.catalog` discovers every module of this package, so
a new loader is a new file here and nothing lists them by hand."""
