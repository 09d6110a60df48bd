"""Built-in dataset loaders; importing this package registers them in `data.catalog`."""

from data.loaders import (
    aircraft,  # noqa: F401
    cifar,  # noqa: F401
    coop,  # noqa: F401
    domainbed,  # noqa: F401
    domains,  # noqa: F401
    imagenet,  # noqa: F401
)
from data.toy import datasets as _toy  # noqa: F401
