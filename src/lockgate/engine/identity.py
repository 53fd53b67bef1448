"""Who a run acts for: its recorded starter (identity) and, per execution attempt, its authority.

Identity is persisted with the run; authority never is. ``Engine(resolve_scopes=fn)`` is
asked on every execution attempt, so a permission revoked after the start is not asserted
by a later resume. A run with no recorded starter runs as ``SYSTEM_SUBJECT`` and is not put
through the resolver; without a resolver a run has no scopes (fail closed).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..origin import SYSTEM_SUBJECT, Subject

__all__ = ["ScopeResolver", "run_subject", "scopes_for"]

ScopeResolver = Callable[[Subject], Iterable[str] | Awaitable[Iterable[str]]]
"""``resolve_scopes(subject)``: the scopes ``subject`` holds now (sync or async)."""


def run_subject(row: dict[str, Any]) -> Subject:
    """The run's recorded starter (identity fields only), else the system subject."""
    return Subject.from_json(row.get("subject")) or SYSTEM_SUBJECT


async def scopes_for(resolver: ScopeResolver | None, subject: Subject) -> frozenset[str]:
    """What ``subject`` may do on this attempt: asked of ``resolver`` each time, never stored."""
    if resolver is None or subject is SYSTEM_SUBJECT:
        return frozenset()
    found = resolver(subject)
    if inspect.isawaitable(found):
        found = await found
    return frozenset(found)
