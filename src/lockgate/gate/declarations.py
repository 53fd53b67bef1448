"""Validation of the gate's options on each workflow (run once, at boot)."""

from __future__ import annotations

from ..definitions import WorkflowDef
from ..errors import DefinitionError

__all__ = ["validate_gate"]

KNOWN: frozenset[str] = frozenset()


def validate_gate(defs: dict[str, WorkflowDef]) -> None:
    """Refuse unknown options and impossible combinations, naming workflow and fields."""
    for defn in defs.values():
        for option in defn.options:
            if option not in KNOWN:
                raise DefinitionError(defn.name, option, "unknown workflow option")
