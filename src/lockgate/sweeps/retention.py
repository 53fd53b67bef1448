"""Retention: runs that ended longer ago than ``Engine(retention=...)`` are forgotten.

Each tick deletes in commits of ``BATCH`` rows, at most ``MAX_BATCHES`` of each kind, so
the writer is never held long; a backlog (the first tick over a store that kept everything)
is worked off over the following ticks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..durations import format_seconds
from ..store import retention
from . import Sweep

if TYPE_CHECKING:
    from ..engine.engine import Engine

log = logging.getLogger("lockgate.sweeps")

BATCH = 500
MAX_BATCHES = 20


@dataclass(frozen=True)
class Forgotten:
    """What one retention tick deleted."""

    runs: int = 0
    ledger_rows: int = 0
    workers: int = 0
    pauses: int = 0


def retention_sweep(engine: Engine) -> Sweep | None:
    """The sweep, ticking a quarter of the retention period apart (at most every ten minutes); none without one."""
    if engine.retention is None:
        return None
    return Sweep("retention", min(engine.retention / 4, 600.0), forget_expired)


async def forget_expired(engine: Engine) -> Forgotten:
    """Delete what ended before ``now - retention``: runs with their records, ledger rows, old workers and pauses."""
    assert engine.retention is not None
    cutoff = engine.clock.now() - engine.retention
    runs = await _in_batches(engine, retention.forget_ended_runs, cutoff)
    ledger = await _in_batches(engine, retention.forget_ledger, cutoff)
    workers, pauses = await engine.store.write(retention.forget_stale, cutoff, engine.worker_id)
    forgotten = Forgotten(runs, ledger, workers, pauses)
    if runs or ledger or workers:
        log.info(
            "retention: forgot %d run(s), %d ledger row(s) and %d worker(s) older than %s",
            runs,
            ledger,
            workers,
            format_seconds(engine.retention),
        )
    return forgotten


async def _in_batches(engine: Engine, op: retention.Forget, cutoff: float) -> int:
    total = 0
    for _ in range(MAX_BATCHES):
        n = await engine.store.write(op, cutoff, BATCH)
        total += n
        if n < BATCH:
            break
    return total
