"""Retention: runs that ended longer ago than ``Engine(retention=...)`` are forgotten.

Each tick deletes in commits of ``BATCH`` rows, at most ``MAX_BATCHES`` of each kind, so
the writer is never held long; a backlog (the first tick over a store that kept everything)
is worked off over the following ticks. On PostgreSQL the run history (journal, step attempts,
events) is partitioned by time (docs/history.md): each tick also makes the partitions of the
next intervals ahead, and retires those past retention: their interval's expired runs deleted by
range of run id, the partitions dropped instead of their rows deleted; only the runs older than
every partition left are selected one by one. The ledger is partitioned by time alike: its
partitions past retention are dropped whole. There the sweep runs without a retention too, to
make partitions ahead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from functools import partial

from ..durations import format_seconds
from ..gate.runtime import WorkerRuntime
from ..ids import id_millis
from ..store import events as store_events
from ..store import history as store_history
from ..store import retention as store_retention
from ..store import timed as store_timed
from ..store.base import Store
from .base import Sweep, SweepSettings

__all__ = [
    "AHEAD",
    "BATCH",
    "MAX_BATCHES",
    "SLICE",
    "Forgotten",
    "drop_ledger_partitions",
    "drop_timed_partitions",
    "forget_expired",
    "forget_partition_runs",
    "keep_partitions",
    "retention_sweep",
]

log = logging.getLogger("lockgate.sweeps")

BATCH = 500
MAX_BATCHES = 20
AHEAD = 2
"""Partitions of the run history are made this many intervals ahead of the clock."""
SLICE = 10_000
"""About how many runs of a retired partition one commit forgets."""
UPKEEP = 600.0
"""Seconds between ticks that only make partitions ahead (PostgreSQL without a retention)."""


@dataclass(frozen=True)
class Forgotten:
    """What one retention tick deleted."""

    runs: int = 0
    ledger_rows: int = 0
    workers: int = 0
    pauses: int = 0
    events: int = 0
    deliveries: int = 0
    partitions_made: int = field(default=0, compare=False)
    """History partitions made ahead (PostgreSQL); not compared: they follow the clock, not the runs."""
    partitions_dropped: int = field(default=0, compare=False)
    """History partitions dropped past retention (PostgreSQL), their rows with them."""
    ledger_partitions_dropped: int = field(default=0, compare=False)
    """Ledger partitions dropped past retention (PostgreSQL), their decisions with them."""
    timed_partitions_dropped: int = field(default=0, compare=False)
    """Partitions of domain events, deliveries and schedule firings dropped past their retentions (PostgreSQL)."""


def retention_sweep(worker: WorkerRuntime, settings: SweepSettings) -> Sweep | None:
    """The sweep, ticking a quarter of the shortest retention period apart (at most every ten minutes); none
    without one. Event and delivery retention count only in an app that declares events."""
    given = [settings.retention]
    if worker.runtime.app.definitions() and worker.runtime.app.events:
        given += [settings.event_retention, settings.delivery_retention]
    ttls = [t for t in given if t is not None]
    partitioned = worker.runtime.store.dialect == "postgres"
    if not ttls and not partitioned:
        return None
    tick = partial(
        forget_expired,
        retention=settings.retention,
        event_retention=settings.event_retention,
        delivery_retention=settings.delivery_retention,
        history_partition=settings.history_partition,
    )
    return Sweep("retention", min([t / 4 for t in ttls] + [UPKEEP]), tick)


async def forget_expired(
    worker: WorkerRuntime,
    retention: float | None,
    *,
    event_retention: float | None = None,
    delivery_retention: float | None = None,
    history_partition: float = 86400.0,
) -> Forgotten:
    """Delete what ended before ``now - retention``: runs with their records, ledger rows, old workers and
    pauses; and domain events and deliveries past their own retention (in an app that declares events).
    On PostgreSQL, make the history's partitions ahead and drop those past retention."""
    rt = worker.runtime
    # Partitions first: the runs a retired partition kept, or created in a gap below the next one, are
    # forgotten one by one from then on (store/history.py per_run_before), in this same tick.
    made, dropped, runs = await keep_partitions(worker, retention, history_partition)
    ledger = workers = pauses = ledger_dropped = timed_dropped = 0
    if retention is not None:
        cutoff = rt.clock.now() - retention
        runs += await _in_batches(worker, store_retention.forget_ended_runs, cutoff)
        ledger_dropped = await drop_ledger_partitions(rt.store, cutoff)
        # the firings' own rows go one by one in the schedule sweep (sweeps/schedules.py forget_firings)
        timed_dropped += await drop_timed_partitions(rt.store, store_timed.FIRINGS, cutoff)
        ledger = await _in_batches(worker, store_retention.forget_ledger, cutoff)
        workers, pauses = await rt.store.write(store_retention.forget_stale, cutoff, worker.worker_id)
    events = deliveries = 0
    if rt.app.events:
        now = rt.clock.now()
        # deliveries first: a pending one moves out of its partition before its event's is judged
        if delivery_retention is not None:
            timed_dropped += await drop_timed_partitions(rt.store, store_timed.DELIVERIES, now - delivery_retention)
        if event_retention is not None:
            timed_dropped += await drop_timed_partitions(rt.store, store_timed.EVENTS, now - event_retention)
        events, deliveries = await _forget_events(worker, event_retention, delivery_retention)
    forgotten = Forgotten(runs, ledger, workers, pauses, events, deliveries)
    forgotten = replace(
        forgotten,
        partitions_made=made,
        partitions_dropped=dropped,
        ledger_partitions_dropped=ledger_dropped,
        timed_partitions_dropped=timed_dropped,
    )
    if runs or ledger or workers:
        log.info(
            "retention: forgot %d run(s), %d ledger row(s) and %d worker(s) older than %s",
            runs,
            ledger,
            workers,
            format_seconds(retention or 0),
        )
    return forgotten


async def keep_partitions(worker: WorkerRuntime, retention: float | None, interval: float) -> tuple[int, int, int]:
    """Make the history's partitions ``AHEAD`` intervals ahead, and retire those whose runs were all created
    before ``now - retention``: their expired runs forgotten by range, the rows of the runs retention keeps
    moved, the partitions dropped. How many partitions were made and dropped, and how many runs forgotten.
    Nothing on a store that does not partition (SQLite)."""
    rt = worker.runtime
    now = rt.clock.now()
    made = await rt.store.write(store_history.make_ahead, now, interval, now + AHEAD * interval)
    dropped = runs = 0
    if retention is not None:
        cutoff = now - retention
        parts = await rt.store.read(store_history.partitions)
        for part in sorted(parts, key=lambda p: p.ends_at or 0):  # oldest first: the runs below go one by one
            if part.ends_at is not None and part.ends_at <= cutoff:
                forgotten = await forget_partition_runs(rt.store, part, cutoff, interval)
                kept = await rt.store.write(store_history.retire, part, cutoff)
                dropped += 1
                runs += forgotten
                log.info(
                    "retention: dropped history partition %s, %d run(s) forgotten, %d kept",
                    part.suffix,
                    forgotten,
                    kept,
                )
    return len(made), dropped, runs


async def drop_ledger_partitions(store: Store, cutoff: float) -> int:
    """Drop the ledger's partitions whose decisions were all made before ``cutoff``, oldest first, each in a
    commit of its own (its rows go whole: no decision outlives retention); how many. The decisions left
    before ``cutoff`` (in the first partition or the default one) go one by one after (``forget_ledger``).
    None on a store that does not partition (SQLite)."""
    dropped = 0
    parts = await store.read(store_history.ledger_partitions)
    for part in sorted(parts, key=lambda p: p.ends_at or 0):
        if part.ends_at is not None and part.ends_at <= cutoff and await store.write(store_history.drop_ledger, part):
            dropped += 1
            log.info("retention: dropped ledger partition %s", part.suffix)
    return dropped


async def drop_timed_partitions(store: Store, table: str, cutoff: float) -> int:
    """Retire ``table``'s partitions (events, deliveries or firings) whose interval ended before ``cutoff``, oldest
    first, each in a commit of its own: the rows that outlive their partition (a pending delivery and its event,
    an unfinished firing) move to the default partition, the rest go with the drop; how many were dropped. The
    rows left before ``cutoff`` go one by one after. None on a store that does not partition (SQLite)."""
    dropped = 0
    parts = await store.read(store_timed.partitions, table)
    for part in sorted(parts, key=lambda p: p.ends_at or 0):
        if part.ends_at is None or part.ends_at > cutoff:
            continue
        moved = await store.write(store_timed.retire, table, part, cutoff)
        if moved is not None:
            dropped += 1
            log.info("retention: dropped %s partition %s, %d row(s) kept", table, part.suffix, moved)
    return dropped


async def forget_partition_runs(store: Store, part: store_history.Partition, cutoff: float, interval: float) -> int:
    """Forget the expired runs of ``part``'s range a slice at a time, one commit each (about ``SLICE`` runs:
    a slice's span halves after one that deleted twice as many, doubles after one that deleted half), so
    the writer is never held long, however many runs the interval holds; how many."""
    if part.hi is None:
        return 0
    if part.lo is None:  # the first partition: its runs went one by one already, the few left go at once
        return int(await store.write(store_history.forget_range, None, part.hi, cutoff))
    start, end = id_millis(part.lo) / 1000, id_millis(part.hi) / 1000
    span, total = max(interval, end - start) / 64, 0
    while start < end:
        upto = min(start + span, end)
        hi = part.hi if upto >= end else store_history.bound_of(upto)
        n = int(await store.write(store_history.forget_range, store_history.bound_of(start), hi, cutoff))
        total += n
        if n > 2 * SLICE:
            span /= 2
        elif n < SLICE / 2:
            span *= 2
        start = upto
    return total


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
