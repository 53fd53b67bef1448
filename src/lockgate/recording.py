"""How much of a run's execution is recorded: the mode (``full`` or ``coarse``) and a step input's size.

``full`` keeps a row per step attempt (with the step's ``input=``); ``coarse`` keeps the
journal alone. ``LOCKGATE_RECORDING`` set in a process's environment wins over the
``recording=`` its code passes, so a deployment can turn recording up (or down) without a
code change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .errors import InvalidArgument

__all__ = [
    "DEFAULT_INPUT_LIMIT",
    "MODES",
    "RECORDING_ENV",
    "REPLAY_SHAPE_LIMIT",
    "TRUNCATED",
    "check_input_limit",
    "resolve_recording",
]

RECORDING_ENV = "LOCKGATE_RECORDING"
MODES = ("full", "coarse")
DEFAULT_INPUT_LIMIT = 64 * 1024
"""Bytes of a step's ``input=`` kept on its attempt row; beyond it the head is kept, marked truncated."""
REPLAY_SHAPE_LIMIT = 2000
"""Recorded journal entries above which a run's re-entry is not compared with its journal (the tripwire)."""
TRUNCATED = "$truncated"
"""The key of the object a truncated input is stored as: ``{"$truncated": true, "size": n, "head": "..."}``."""


def resolve_recording(given: str, environ: Mapping[str, str] = os.environ) -> str:
    """The mode in force: ``LOCKGATE_RECORDING`` when set, else ``given``; refused when neither is a mode."""
    env = environ.get(RECORDING_ENV, "").strip()
    if env:
        if env not in MODES:
            raise InvalidArgument(f"{RECORDING_ENV} must be 'full' or 'coarse', not {env!r}")
        return env
    if given not in MODES:
        raise InvalidArgument(f"recording must be 'full' or 'coarse', not {given!r}")
    return given


def check_input_limit(limit: object) -> int:
    """``step_input_limit`` as given (bytes, ``>= 0``), or ``InvalidArgument`` naming it."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidArgument(f"step_input_limit must be a whole number of bytes >= 0, got {limit!r}")
    return limit
