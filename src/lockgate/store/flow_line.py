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
    (its run lost its hold) waits there, or on SQLite asks as ``acquire`` does."""
    place = {"key": key, "run_id": fence.run_id, "step_key": step_key, "priority": priority}
    params = {**place, "now": clock(), "attempt": attempt, "first": first, "epoch": fence.epoch}
    if not tx.single_writer:
        # Not read (no round trip): a step with a place already waits in place there (a run back from a flow park
        # does not join: it asks), and one whose place was handed to a lost hold finds it at its next look.
        await tx.execute("stepflow_join_line", params)
    elif not await tx.expect("stepflow_join_line", params):  # in-process, the answer costs nothing: it asks
        return await acquire(tx, None, key, fence, step_key, priority, clock, attempt, first, None, True, inline)
    return Grant(False, {}, moving=True)


with_locks(join_line, lambda args, kwargs: lock_names([args[0]]))
