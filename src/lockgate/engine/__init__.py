"""The engine: client, dispatcher and executor."""

from .client import Client
from .engine import Engine

__all__ = ["Client", "Engine"]
