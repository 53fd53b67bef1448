"""The schedule sweep: fire every slot that came due, once across replicas.

Each tick settles open firings (``engine/firing_settle.settle``), then reads the schedules whose
``next_at`` has come (an index range: the tick's work follows the slots due, not the number
of schedules, declared or created at runtime) and fires each one's due slots oldest first,
in batches of schedules that share a claim transaction and a gate offer
(``engine/firing_many.fire_many``; one by one, ``engine/schedule_due.fire_schedule``, for a
paused schedule and for ``cancel_other`` with several slots due). The unique claim row of
each slot, not the sweep's lease, is what makes a slot fire once: two replicas ticking at the
same time each reach the slot, and one of them gets its row.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from ..engine.firing import Fired, ScheduleRuntime
from ..engine.firing_many import DueSchedule, batchable, fire_many
from ..engine.firing_settle import settle
from ..engine.schedule_book import ScheduleBook
from ..engine.schedule_due import GRACE, MAX_PER_TICK, Due, due_slots, fire_schedule
from ..gate.runtime import WorkerRuntime
from ..schedule import ScheduleDef
from ..store import schedules as sched_ops
from ..store import workers
from ..store.base import Row
from .base import SteadySweep, Sweep, SweepSettings

__all__ = [
    "BATCH",
    "DUE_PER_TICK",
    "GRACE",
    "INTERVAL",
    "MAX_PER_TICK",
    "Due",
    "Tick",
    "due_slots",
    "fire_due",
    "forget_firings",
    "register",
    "schedule_sweep",
]

log = logging.getLogger("lockgate.schedules")

INTERVAL = 0.5
"""Seconds between ticks: how late past its slot a firing may start, at most."""

PARALLEL = 256
"""Schedules fired one by one at once in one tick (their writes share group commits)."""

BATCH = 500
"""Slots claimed in one transaction and offered to the gate together, about (a schedule is never split)."""

DUE_PER_TICK = 5000
"""Schedules one tick looks at, at most (the most overdue first); the rest at the next tick."""

UNKNOWN_RETRY = 60.0
"""Seconds before a due schedule declared by other code (not this process's) is looked at again."""

FORGET_EVERY = 120
"""Ticks between two passes forgetting firings older than the engine's retention (about a minute)."""


@dataclass
class Tick:
    """What one tick did."""

    fired: list[Fired] = field(default_factory=list)
    missed: int = 0
    settled: int = 0
    looked_at: int = 0
    """Schedules whose ``next_at`` had come (the tick's work)."""


async def register(rt: ScheduleRuntime, *, orphan_others: bool) -> None:
    """Record every declared schedule; with ``orphan_others`` mark the rest of the declared ones orphaned."""
    declared = [sched_ops.Declared(s.name, s.workflow, s.spec, s.timezone, s.next_due) for s in rt.schedules.values()]
    await rt.store.write(sched_ops.register, declared, rt.clock.now(), orphan_others=orphan_others)


async def fire_due(rt: ScheduleRuntime, book: ScheduleBook | None = None) -> Tick:
    """One tick: settle open firings, then fire the due slots of each schedule whose ``next_at`` came.

    ``book`` (kept by the caller from tick to tick) holds the runtime schedules' parsed options.
    The due schedules are fired in batches of about ``BATCH`` slots (``engine/firing_many``): one
    claim transaction and one gate offer per batch, not per slot. Batches are taken in name order,
    so the rows they lock are locked in one order across a group commit and across replicas.
    """
    book = book or ScheduleBook(rt.schedules)
    tick = Tick(settled=await settle(rt, book))
    now = rt.clock.now()
    rows = await rt.store.read(sched_ops.due_schedules, now, DUE_PER_TICK)
    tick.looked_at = len(rows)
    gate = asyncio.Semaphore(PARALLEL)
    batches: list[list[DueSchedule]] = [[]]
    alone: list[tuple[ScheduleDef | None, Row]] = []
    slots = 0  # in the last batch
    for state in sorted(rows, key=lambda r: str(r["name"])):
        sched = book.of_row(state)
        if sched is None or state["paused"]:
            alone.append((sched, state))
            continue
        watermark = float(state["watermark"]) if state["watermark"] is not None else now
        due = due_slots(sched, watermark, now)
        if not batchable(sched, due):
            alone.append((sched, state))
            continue
        if batches[-1] and slots + len(due.fire) > BATCH:
            batches.append([])
            slots = 0
        batches[-1].append(DueSchedule(sched, state, due))
        slots += len(due.fire)

    async def one(sched: ScheduleDef | None, state: Row) -> None:
        async with gate:
            if sched is None:  # declared by code this process does not run: its own engines fire it
                kept = float(state["watermark"] or 0.0)  # its watermark stays where it is
                later = now + UNKNOWN_RETRY
                await rt.store.write(sched_ops.advance, state["name"], kept, 0, now, later, int(state["revision"]))
                return
            fired, missed = await fire_schedule(rt, sched, state, now)
        tick.fired += fired
        tick.missed += missed

    async def many(batch: list[DueSchedule]) -> None:
        for fired, missed in await fire_many(rt, batch, now):
            tick.fired += fired
            tick.missed += missed

    await asyncio.gather(*(one(sched, state) for sched, state in alone), *(many(b) for b in batches if b))
    return tick


async def forget_firings(rt: ScheduleRuntime, cutoff: float, batch: int = 500, batches: int = 20) -> int:
    """Delete finished firings claimed before ``cutoff``, in short commits; how many."""
    total = 0
    for _ in range(batches):
        n = await rt.store.write(sched_ops.forget_firings, cutoff, batch)
        total += n
        if n < batch:
            break
    return total


def schedule_sweep(worker: WorkerRuntime, settings: SweepSettings) -> Sweep | None:
    """The sweep, ticking twice a second (a slot fires at most that late). An app that declares no
    schedule may still fire runtime ones: its tick is then one index read that finds none due."""
    registered = False
    book = ScheduleBook(worker.runtime.app.schedules())
    ticks = 0
    retention = settings.retention

    async def tick(worker: WorkerRuntime) -> Tick:
        nonlocal registered, ticks
        rt = runtime_for(worker)
        if not registered:
            await register(rt, orphan_others=True)
            registered = True
        ticks += 1
        if retention is not None and ticks % FORGET_EVERY == 1:
            await forget_firings(rt, rt.clock.now() - retention)
        # A tick firing thousands outlives its lease: held meanwhile, so no other replica ticks the
        # same due rows at once (their claims would only wait on each other's locks).
        holding = asyncio.create_task(_hold_lease(worker))
        try:
            return await fire_due(rt, book)
        finally:
            holding.cancel()

    return SteadySweep("schedules", INTERVAL, tick)


async def _hold_lease(worker: WorkerRuntime) -> None:
    """Renew the sweep's lease while a tick runs (as its holder: the same write that took it)."""
    store, clock = worker.runtime.store, worker.runtime.clock
    while True:
        await asyncio.sleep(INTERVAL * 0.8)
        try:
            await store.write(workers.acquire_sweep, "schedules", worker.worker_id, clock.now(), INTERVAL * 2)
        except Exception as exc:  # the tick's own writes meet the outage and report it
            log.debug("schedules: renewing the sweep's lease: %s", exc)
            return


def runtime_for(worker: WorkerRuntime) -> ScheduleRuntime:
    """What the schedule machinery works through in a process that executes runs."""
    return ScheduleRuntime(worker.runtime, worker.worker_id)
