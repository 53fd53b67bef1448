"""Run counts: the changes a trigger appends as runs are written fold into the counts (PostgreSQL).

``/metrics`` and ``lockgate stats`` read the runs by workflow and status from ``lockgate_run_counts`` plus
the changes not folded yet (migration 0040), so a read costs the same however many runs the store holds;
folding every few seconds keeps those changes few. SQLite counts its runs at each read: no sweep there.
"""

from __future__ import annotations

from ..gate.runtime import WorkerRuntime
from ..store import runs
from .base import Sweep, SweepSettings

__all__ = ["INTERVAL", "counts_sweep", "fold_counts"]

INTERVAL = 5.0
"""Seconds between folds: a read sums at most about this long's changes beside the counts."""


def counts_sweep(worker: WorkerRuntime, settings: SweepSettings) -> Sweep | None:
    """The sweep on PostgreSQL; none on SQLite."""
    if worker.runtime.store.dialect != "postgres":
        return None
    return Sweep("counts", INTERVAL, fold_counts)


async def fold_counts(worker: WorkerRuntime) -> int:
    """Fold the appended changes into the counts; how many workflow and status pairs changed."""
    return await worker.runtime.store.write(runs.fold_run_counts)
