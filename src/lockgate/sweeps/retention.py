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
from ..gate.runtime import WorkerRuntime
from ..store import events as store_events
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
    events: int = 0
    deliveries: int = 0


def retention_sweep(worker: WorkerRuntime, settings: SweepSettings) -> Sweep | None:
    """The sweep, ticking a quarter of the shortest retention period apart (at most every ten minutes); none
    without one. Event and delivery retention count only in an app that declares events."""
    given = [settings.retention]
    if worker.runtime.app.definitions() and worker.runtime.app.events:
        given += [settings.event_retention, settings.delivery_retention]
    ttls = [t for t in given if t is not None]
    if not ttls:
        return None
    tick = partial(
        forget_expired,
        retention=settings.retention,
        event_retention=settings.event_retention,
        delivery_retention=settings.delivery_retention,
    )
    return Sweep("retention", min(min(ttls) / 4, 600.0), tick)


async def forget_expired(
    worker: WorkerRuntime,
    retention: float | None,
    *,
    event_retention: float | None = None,
    delivery_retention: float | None = None,
) -> Forgotten:
    """Delete what ended before ``now - retention``: runs with their records, ledger rows, old workers and
    pauses; and domain events and deliveries past their own retention (in an app that declares events)."""
    rt = worker.runtime
    runs = ledger = workers = pauses = 0
    if retention is not None:
        cutoff = rt.clock.now() - retention
        runs = await _in_batches(worker, store_retention.forget_ended_runs, cutoff)
        ledger = await _in_batches(worker, store_retention.forget_ledger, cutoff)
        workers, pauses = await rt.store.write(store_retention.forget_stale, cutoff, worker.worker_id)
    events = deliveries = 0
    if rt.app.events:
        events, deliveries = await _forget_events(worker, event_retention, delivery_retention)
    forgotten = Forgotten(runs, ledger, workers, pauses, events, deliveries)
    if runs or ledger or workers:
        log.info(
            "retention: forgot %d run(s), %d ledger row(s) and %d worker(s) older than %s",
            runs,
            ledger,
            workers,
            format_seconds(retention or 0),
        )
    return forgotten


async def _forget_events(
    worker: WorkerRuntime, event_retention: float | None, delivery_retention: float | None
) -> tuple[int, int]:
    """Domain events and deliveries past their own TTLs (the delivery TTL is the dedupe window of custom keys)."""
    now = worker.runtime.clock.now()
    events = deliveries = 0
    if event_retention is not None:
        events = await _in_batches(worker, store_events.forget_events, now - event_retention)
    if delivery_retention is not None:
        deliveries = await _in_batches(worker, store_events.forget_deliveries, now - delivery_retention)
    if events or deliveries:
        log.info("retention: forgot %d event(s) and %d deliver(ies)", events, deliveries)
    return events, deliveries


async def _in_batches(worker: WorkerRuntime, op: store_retention.Forget, cutoff: float) -> int:
    total = 0
    for _ in range(MAX_BATCHES):
        n = await worker.runtime.store.write(op, cutoff, BATCH)
        total += n
        if n < BATCH:
            break
    return total
