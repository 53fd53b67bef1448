"""What a name may hold: the names of workflows, events, schedules, queues, signals, updates and
flow-control keys are stored, logged and printed in tables, so each is text a database holds and a
line shows whole."""

from __future__ import annotations

import unicodedata
from typing import Any

__all__ = ["name_problem"]

_REFUSED = {"Cc": "a control character", "Cs": "a lone surrogate", "Zl": "a line separator", "Zp": "a line separator"}


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name anything (a sentence naming the first bad character), or ``None``.

    A name is a non-blank string without NUL, newlines, tabs or other control characters, line
    separators or lone surrogates (a surrogate is not text: no database stores it).
    """
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not name.strip():
        return f"must not be empty or blank, got {name!r}"
    if name.isascii() and name.isprintable():
        return None
    for i, ch in enumerate(name):
        what = _REFUSED.get(unicodedata.category(ch))
        if what is not None:
            return f"{name!r} holds {what} ({ch!r}) at position {i}"
    return None
