"""Operations with a many-at-once form, for group commits that carry many alike.

A group commit often holds hundreds of calls of one operation (a burst of starts). A
store may run a run of consecutive calls of such an operation as one call of its
*many* form, which writes all their rows with a few multi-row statements instead of a
few statements per call. The many form must leave the store exactly as the calls made
one after the other would, and return their results in order; if it raises, the store
falls back to the calls one by one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .base import Tx

__all__ = ["Call", "Many", "many_form", "with_many"]

Call = tuple[tuple[Any, ...], dict[str, Any]]
"""One call's arguments after the transaction: ``(args, kwargs)``."""

Many = Callable[[Tx, Sequence[Call]], Awaitable[list[Any]]]

_MANY: dict[Callable[..., Any], Many] = {}


def with_many(op: Callable[..., Any], many: Many) -> None:
    """Declare ``many`` as ``op``'s many-at-once form."""
    _MANY[op] = many


def many_form(op: Callable[..., Any]) -> Many | None:
    """``op``'s many-at-once form, if it has one."""
    return _MANY.get(op)
