"""The errors a user can cause and fix; the CLI prints their message without a traceback."""

from benchmark.backbone import BackboneError
from benchmark.config import ConfigError
from benchmark.registry import MethodError
from data.base import DatasetError

USER_ERRORS = (BackboneError, ConfigError, MethodError, DatasetError)
