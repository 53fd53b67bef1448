"""Joining a step flow key's line without a decision.

A step whose worker already has a step of the same key waiting in place (asked earlier, refused,
not handed a slot since) would be refused too: the key's room goes to the held waiters in line
order, and this step comes after that one. It takes the last place in the line at once, waiting
in place under its hold: no lock of the key, no read of its state. Every slot freed, window opened
or pause lifted hands room to the first held waiters (``flow._wake``), this one in its turn; and
a waiter that hears nothing for a while asks again, as any does.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import Tx
from .coalesce import with_locks
from .flow import Grant, acquire, lock_names
from .shared import Fence

__all__ = ["join_line"]


async def join_line(
    tx: Tx,
    key: str,
    fence: Fence,
    step_key: str,
    priority: int,
    clock: Callable[[], float],
    attempt: int,
    first: float,
    inline: float,
) -> Grant:
    """Take the step's place at the back of ``key``'s line, waiting in place; a step that has a place already
    (its run asked before it parked) asks as ``acquire`` does."""
    place = {"key": key, "run_id": fence.run_id, "step_key": step_key, "priority": priority}
    joined = await tx.one(
        "stepflow_join_line", {**place, "now": clock(), "attempt": attempt, "first": first, "epoch": fence.epoch}
    )
    if joined is None:
        return await acquire(tx, None, key, fence, step_key, priority, clock, attempt, first, None, True, inline)
    return Grant(False, {}, moving=True)


with_locks(join_line, lambda args, kwargs: lock_names([args[0]]))
