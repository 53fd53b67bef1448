"""The engine: the ``Client`` and ``Engine`` facades over a shared core, the dispatcher and the executor."""

from .client import Client
from .engine import Engine

__all__ = ["Client", "Engine"]
