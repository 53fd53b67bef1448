"""Store operations for retention: forgetting what ended long ago.

A run that ended before the cutoff goes with everything recorded about it (journal,
attempts, events, messages, stream chunks), unless its parent is still live and may yet wait for it.
Ledger rows older than the cutoff go too; ``flow()``'s counts, kept apart, do not change.
Each call deletes at most ``limit`` rows of its kind, so one commit stays short.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from . import history
from .base import Tx

__all__ = ["RUN_RECORDS", "Forget", "forget_ended_runs", "forget_ledger", "forget_stale"]

Forget = Callable[[Tx, float, int], Awaitable[int]]
"""An op deleting up to ``limit`` rows older than ``cutoff``: ``op(tx, cutoff, limit)``, how many it deleted."""

RUN_RECORDS = (
    "forget_journal",
    "forget_attempts",
    "forget_events",
    "forget_messages",
    "forget_flow_slots",  # flow.sql: a step's place in a flow-control key's line
    "forget_callback_tokens",  # callbacks.sql: the approval tokens the run made
    "forget_stream_chunks",  # what its body streamed (ctx.stream)
    "forget_runs",
)
"""The statements that delete a run's records, given its id (the run's own row last)."""


async def forget_ended_runs(tx: Tx, cutoff: float, limit: int) -> int:
    """Delete up to ``limit`` runs that ended before ``cutoff``, with their records; how many.

    Where the run history is partitioned (PostgreSQL), only the runs created before its oldest partition of
    one interval: the others go with their partition (``history.retire``), by range, not one by one.
    """
    created_before = await history.per_run_before(tx, cutoff)
    rows = await tx.execute("ended_before", {"cutoff": cutoff, "created_before": created_before, "limit": limit})
    if not rows:
        return 0
    ids = json.dumps([row["id"] for row in rows])
    for name in RUN_RECORDS:
        await tx.execute(name, {"ids": ids})
    return len(rows)


async def forget_ledger(tx: Tx, cutoff: float, limit: int) -> int:
    """Delete up to ``limit`` ledger rows written before ``cutoff``; how many.

    The rows not yet folded into ``flow()``'s counts are folded first (where the store folds
    them at commit; a trigger counts them as they are written elsewhere), so the counts keep them.
    Where the ledger is partitioned (PostgreSQL), only the rows older than its oldest partition of one
    interval: the others go with their partition (``history.drop_ledger``), not one by one.
    """
    await tx.execute("count_ledger")
    await tx.execute("ledger_counted")
    before = await history.ledger_before(tx, cutoff)
    return len(await tx.execute("forget_ledger", {"cutoff": before, "limit": limit}))


async def forget_stale(tx: Tx, cutoff: float, me: str) -> tuple[int, int]:
    """Delete workers not heard from since ``cutoff`` (never ``me``) and pauses that ended before it; how many."""
    workers = await tx.execute("forget_workers", {"cutoff": cutoff, "me": me})
    pauses = await tx.execute("forget_pauses", {"cutoff": cutoff})
    return len(workers), len(pauses)
