"""Retention: runs that ended longer ago than ``Engine(retention=...)`` are forgotten.

Each tick deletes in commits of ``BATCH`` rows, at most ``MAX_BATCHES`` of each kind, so
the writer is never held long; a backlog (the first tick over a store that kept everything)
is worked off over the following ticks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

from ..durations import format_seconds
from ..runtime import WorkerRuntime
from ..store import retention as store_retention
from .base import Sweep, SweepSettings

__all__ = ["BATCH", "MAX_BATCHES", "Forgotten", "forget_expired", "retention_sweep"]

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


def retention_sweep(worker: WorkerRuntime, settings: SweepSettings) -> Sweep | None:
    """The sweep, ticking a quarter of the retention period apart (at most every ten minutes); none without one."""
    if settings.retention is None:
        return None
    return Sweep("retention", min(settings.retention / 4, 600.0), partial(forget_expired, retention=settings.retention))


async def forget_expired(worker: WorkerRuntime, retention: float) -> Forgotten:
    """Delete what ended before ``now - retention``: runs with their records, ledger rows, old workers and pauses."""
    rt = worker.runtime
    cutoff = rt.clock.now() - retention
    runs = await _in_batches(worker, store_retention.forget_ended_runs, cutoff)
    ledger = await _in_batches(worker, store_retention.forget_ledger, cutoff)
    workers, pauses = await rt.store.write(store_retention.forget_stale, cutoff, worker.worker_id)
    forgotten = Forgotten(runs, ledger, workers, pauses)
    if runs or ledger or workers:
        log.info(
            "retention: forgot %d run(s), %d ledger row(s) and %d worker(s) older than %s",
            runs,
            ledger,
            workers,
            format_seconds(retention),
        )
    return forgotten


async def _in_batches(worker: WorkerRuntime, op: store_retention.Forget, cutoff: float) -> int:
    total = 0
    for _ in range(MAX_BATCHES):
        n = await worker.runtime.store.write(op, cutoff, BATCH)
        total += n
        if n < BATCH:
            break
    return total
