"""Built-in dataset loaders; importing this package registers them in `data.catalog`."""

from data.loaders import coop  # noqa: F401
from data.loaders import aircraft  # noqa: F401
from data.loaders import imagenet  # noqa: F401
from data.loaders import cifar  # noqa: F401
from data.loaders import domains  # noqa: F401
from data.loaders import domainbed  # noqa: F401
from data.toy import datasets as _toy  # noqa: F401
