"""``ctx.rate_limit``: a sliding window of starts under a key, with no slots (``lockgate_flow_starts``).

Decided under the key's own lock, as a step flow key's decisions are (``store/flow.py``), so the two
never interleave on one key; a weighted window (``cost=``) counts units (``flow_window.take_units``).
"""

from __future__ import annotations

from collections.abc import Callable

from . import flow_window as window
from .base import Tx
from .flow import FLOW_SCOPE
from .gate import lock_key

__all__ = ["locked", "take_rate_slot"]


async def locked(tx: Tx, key: str, clock: Callable[[], float]) -> float:
    """Lock ``key`` and read the time once the lock is held (a pipelined lock is taken when the server
    reaches it: the round trip makes sure it has, so no decision is stamped before the one it follows)."""
    await lock_key(tx, FLOW_SCOPE, key)
    if not tx.single_writer:
        await tx.scalar("stepflow_locked")
    return clock()


async def take_rate_slot(
    tx: Tx, key: str, limit: int, period: float, clock: Callable[[], float], units: int | None = None
) -> float | None:
    """``ctx.rate_limit``: take a slot of the sliding window ``key``; ``None``, else when one opens.
    ``units``: the call's cost, counted in units (``flow_window.take_units``).

    The time is read once the key is locked: the instant a slot is taken is when it is decided."""
    now = await locked(tx, key, clock)
    if units is not None:
        return await window.take_units(tx, key, limit, period, now, units)
    since = now - period
    started = await tx.one("stepflow_started", {"key": key, "since": since})
    used = int(started["n"]) if started else 0
    if used < limit:
        await tx.execute("stepflow_prune_starts", {"key": key, "before": since})
        await tx.execute("stepflow_add_start", {"key": key, "at": now})
        return None
    nth = await tx.scalar("stepflow_nth_start", {"key": key, "since": since, "offset": used - limit})
    return now + period if nth is None else float(nth) + period
