"""Staleness: live runs that stopped moving get one ``run-stalled`` event each."""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING

from ..store import runs
from . import Sweep

if TYPE_CHECKING:
    from ..engine.engine import Engine

log = logging.getLogger("lockgate.sweeps")


def staleness_sweep(engine: Engine) -> Sweep:
    thresholds = [d.stall_after for d in engine.app.definitions().values() if d.stall_after is not None]
    smallest = min([engine.stall_after, *thresholds])
    return Sweep("staleness", max(0.05, min(smallest / 4, 60.0)), report_stalled)


async def report_stalled(engine: Engine) -> int:
    """Write ``run-stalled`` for each live run idle past its threshold; how many were reported."""
    defs = engine.app.definitions()
    now = engine.clock.now()
    smallest = min([engine.stall_after, *(d.stall_after for d in defs.values() if d.stall_after is not None)])
    rows = await engine.store.read(runs.stale_candidates, now - smallest, now)
    reported = 0
    for row in rows:
        defn = defs.get(row["workflow"])
        threshold = defn.stall_after if defn is not None and defn.stall_after is not None else engine.stall_after
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
        await engine.store.write(runs.mark_stalled, row["id"], now, data)
        reported += 1
        if defn is not None and defn.on_stalled is not None:
            try:
                outcome = defn.on_stalled({"run_id": row["id"], "workflow": row["workflow"], **data})
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                log.exception("on_stalled callback of %s failed", row["workflow"])
    return reported
