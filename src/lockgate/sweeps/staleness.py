"""Staleness: live runs that stopped moving get one ``run-stalled`` event each."""

from __future__ import annotations

import inspect
import logging
from functools import partial

from ..gate.runtime import WorkerRuntime
from ..store import runs
from .base import Sweep, SweepSettings

__all__ = ["report_stalled", "staleness_sweep"]

log = logging.getLogger("lockgate.sweeps")


def staleness_sweep(worker: WorkerRuntime, settings: SweepSettings) -> Sweep:
    """The sweep, ticking a quarter of the smallest threshold apart (at most every minute)."""
    defs = worker.runtime.app.definitions()
    thresholds = [d.stall_after for d in defs.values() if d.stall_after is not None]
    smallest = min([settings.stall_after, *thresholds])
    tick = partial(report_stalled, stall_after=settings.stall_after)
    return Sweep("staleness", max(0.05, min(smallest / 4, 60.0)), tick)


async def report_stalled(worker: WorkerRuntime, stall_after: float) -> int:
    """Write ``run-stalled`` for each live run idle past its threshold; how many were reported."""
    rt = worker.runtime
    defs = rt.app.definitions()
    now = rt.clock.now()
    smallest = min([stall_after, *(d.stall_after for d in defs.values() if d.stall_after is not None)])
    rows = await rt.store.read(runs.stale_candidates, now - smallest, now)
    reported = 0
    for row in rows:
        defn = defs.get(row["workflow"])
        threshold = defn.stall_after if defn is not None and defn.stall_after is not None else stall_after
        idle = now - float(row["progress_at"])
        if idle < threshold:
            continue
        if row["status"] == "suspended":
            reason = "suspended"
        elif row["waiting_on"] in ("signal", "update"):
            reason = "awaiting-signal"
        else:
            reason = "no-progress"
        data = {
            "idle_ms": int(idle * 1000),
            "reason": reason,
            "last_progress_at": float(row["progress_at"]),
            "waiting_on": row["waiting_on"],
        }
        await rt.store.write(runs.mark_stalled, row["id"], now, data)
        reported += 1
        if defn is not None and defn.on_stalled is not None:
            try:
                outcome = defn.on_stalled({"run_id": row["id"], "workflow": row["workflow"], **data})
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                log.exception("on_stalled callback of %s failed", row["workflow"])
    return reported
