"""Which Pydantic AI releases ``lockgate.ai`` is built against, checked before anything of it is imported.

The integration is written against Pydantic AI's durable-execution contract
(``pydantic_ai.durable_exec``: ``BaseDurabilityCapability`` and ``CallableOperationBackend``), which
its 2.x releases keep stable; a release outside the range is refused with a typed error instead of
failing somewhere inside a run.
"""

from __future__ import annotations

import importlib.metadata
import re

from ..errors import UnsupportedIntegration

__all__ = ["LOWEST", "SUPPORTED", "UPPER", "check_version", "installed_version"]

LOWEST = (2, 78)
UPPER = (3, 0)
SUPPORTED = ">=2.78,<3"
_DISTRIBUTIONS = ("pydantic-ai-slim", "pydantic-ai")


def installed_version() -> str | None:
    """The installed Pydantic AI's version, or ``None`` when neither distribution is installed."""
    for name in _DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_version(found: str | None) -> None:
    """``UnsupportedIntegration`` unless ``found`` is a Pydantic AI release in ``SUPPORTED``."""
    match = re.match(r"(\d+)\.(\d+)", found or "")
    if match is None or not (LOWEST <= (int(match[1]), int(match[2])) < UPPER):
        raise UnsupportedIntegration("pydantic-ai-slim", found, SUPPORTED, "ai")


check_version(installed_version())
