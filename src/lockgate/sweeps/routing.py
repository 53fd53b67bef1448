"""Routing: due runs that no live worker takes are shown waiting, and reported once they wait too long.

A run whose version (or recorded patches) no live worker's code runs is never failed: each tick, such
runs (due, held by nobody) get ``waiting_on="version"`` with the version they need and what the live
workers offer, and stay due, so the first worker that takes them claims them. Runs no live worker
takes for longer than ``unroutable_after`` (a version, or labels and ``--workflows`` that no live
worker matches) are logged once per group until they are taken; doctor and /metrics read the same.
"""

from __future__ import annotations

import json
import logging
from functools import partial

from ..durations import format_seconds
from ..gate.runtime import WorkerRuntime
from ..routing import judge, parse_offers
from ..store import versions, workers
from .base import Sweep, SweepSettings

__all__ = ["route_check", "routing_sweep"]

log = logging.getLogger("lockgate.routing")


def routing_sweep(worker: WorkerRuntime, settings: SweepSettings) -> Sweep:
    """The sweep, ticking a quarter of ``unroutable_after`` apart (between 50 ms and 15 s)."""
    reported: set[tuple[str, str | None, str]] = set()
    tick = partial(route_check, after=settings.unroutable_after, reported=reported)
    return Sweep("routing", max(0.05, min(settings.unroutable_after / 4, 15.0)), tick)


async def route_check(worker: WorkerRuntime, after: float, reported: set[tuple[str, str | None, str]]) -> int:
    """Mark the due runs waiting for a version; log the groups past ``after`` not yet logged. How many marked."""
    rt = worker.runtime
    now = rt.clock.now()
    groups = await rt.store.read(versions.due_groups, now)
    if not groups:
        reported.clear()
        return 0
    live = [parse_offers(w["offers"]) for w in await rt.store.read(workers.live_offers, now)]
    gaps = judge(groups, live, now, after)
    marked = 0
    for gap in gaps:
        if gap.reason == "version":  # the patches as every run is stamped with them (WorkflowDef.patches_json)
            stamped = json.dumps(gap.patches)
            marked += await rt.store.write(
                versions.mark_waiting_version, now, gap.workflow, gap.version, stamped, gap.offered
            )
    seen = set()
    for gap in gaps:
        key = (gap.workflow, gap.version, gap.reason)
        seen.add(key)
        if gap.reported and key not in reported:
            reported.add(key)
            if gap.reason == "version":
                why = f"no live worker runs version {gap.version!r} (live workers offer {gap.offered})"
            else:
                why = "no live worker takes this workflow (its runs_on labels, --workflows, --exclude)"
            took = format_seconds(round(gap.due_for, 3))
            log.warning("%d run(s) of %s due for %s: %s", gap.runs, gap.workflow, took, why)
    reported.intersection_update(seen)
    return marked
