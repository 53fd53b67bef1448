"""The facades: ``Client`` (start and operate runs) and ``Engine`` (a client that also executes them)."""

from .client import Client
from .engine import Engine

__all__ = ["Client", "Engine"]
