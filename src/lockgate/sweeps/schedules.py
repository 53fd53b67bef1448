"""The schedule sweep: fire every slot that came due, once across replicas.

Each tick settles open firings (``engine/firing.settle``), then for each schedule takes the
slots after its watermark that are due now and fires them oldest first. The unique claim
row of each slot, not the sweep's lease, is what makes a slot fire once: two replicas
ticking at the same time each reach the slot, and one of them gets its row.

Slots late by at most ``GRACE`` are on time (a tick, a takeover after a crash). Older ones
were missed while nothing ran, and ``backfill`` decides: ``None`` fires only the most recent
of them, ``"all"`` each, a window those within it. The rest count as ``missed``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from ..engine.firing import Fired, ScheduleRuntime, fire, settle
from ..gate.runtime import WorkerRuntime
from ..schedule import ScheduleDef
from ..store import schedules as sched_ops
from ..store.base import Row
from .base import Sweep, SweepSettings

__all__ = [
    "GRACE",
    "INTERVAL",
    "MAX_PER_TICK",
    "Tick",
    "due_slots",
    "fire_due",
    "forget_firings",
    "register",
    "schedule_sweep",
]

log = logging.getLogger("lockgate.schedules")

GRACE = 60.0
"""Seconds a slot may be late and still count as on time (not missed)."""

MAX_PER_TICK = 1000
"""Slots one schedule fires per tick at most; a longer backfill goes on at the next tick."""

INTERVAL = 0.5
"""Seconds between ticks: how late past its slot a firing may start, at most."""

PARALLEL = 256
"""Schedules fired at once in one tick (their writes share group commits)."""

FORGET_EVERY = 120
"""Ticks between two passes forgetting firings older than the engine's retention (about a minute)."""


@dataclass
class Tick:
    """What one tick did."""

    fired: list[Fired] = field(default_factory=list)
    missed: int = 0
    settled: int = 0


@dataclass(frozen=True)
class Due:
    """The slots of one schedule to fire now, and the watermark and count of those passed over."""

    fire: list[tuple[float, str]]  # (slot, cause)
    watermark: float | None
    missed: int


def due_slots(sched: ScheduleDef, watermark: float, now: float) -> Due:
    """Which slots after ``watermark`` fire at ``now`` under ``sched``'s backfill rule."""
    cutoff = now - GRACE
    late: list[tuple[float, str]] = []
    missed = 0
    upto: float | None = None
    first_late = sched.slots_between(watermark, cutoff, 1)
    if first_late:  # slots missed while nothing ran
        upto = cutoff
        window_start: float | None = None  # backfill=None: no window, catch up once
        if sched.backfill == "all":
            window_start = watermark
        elif isinstance(sched.backfill, float):
            window_start = max(watermark, now - sched.backfill)
        if window_start is not None:
            slots = sched.slots_between(window_start, cutoff, MAX_PER_TICK)
            late = [(s, "backfill") for s in slots]
            missed = _count(sched, watermark, window_start)
            if len(slots) == MAX_PER_TICK:  # more to come: the next tick goes on after the last one
                return Due(late, slots[-1], missed)
        else:
            newest = sched.latest_at_or_before(cutoff, after=watermark)
            if newest is not None:
                late = [(newest, "catch-up")]
                missed = _count(sched, watermark, newest) - 1
    recent: list[tuple[float, str]] = []
    for slot in sched.slots_between(max(watermark, cutoff), now, MAX_PER_TICK):
        if slot + sched.jitter_for(slot) > now:
            break  # its jitter has not elapsed: the watermark stops before it
        recent.append((slot, "cron"))
        upto = slot
    if recent and late and late[0][1] == "catch-up":
        # Catch up once: the most recent missed slot is the one firing on time now; the rest are missed.
        late, missed = [], missed + 1
    return Due(late + recent, upto, missed)


def _count(sched: ScheduleDef, after: float, upto: float, cap: int = 100_000) -> int:
    """Slots in ``(after, upto]`` (at most ``cap``)."""
    if upto <= after:
        return 0
    if sched.every is not None:
        return int(upto // sched.every) - int(after // sched.every)
    return len(sched.slots_between(after, upto, cap))


async def register(rt: ScheduleRuntime, *, orphan_others: bool) -> None:
    """Record every declared schedule; with ``orphan_others`` mark the rest orphaned."""
    declared = [sched_ops.Declared(s.name, s.workflow, s.spec, s.timezone) for s in rt.schedules.values()]
    await rt.store.write(sched_ops.register, declared, rt.clock.now(), orphan_others=orphan_others)


async def fire_due(rt: ScheduleRuntime, nexts: dict[str, tuple[float, float]] | None = None) -> Tick:
    """One tick: settle open firings, then fire each schedule's due slots.

    ``nexts`` (kept by the caller from tick to tick) remembers each schedule's first slot
    after its watermark, so a tick with nothing due computes no slot.
    """
    tick = Tick(settled=await settle(rt))
    states = {row["name"]: row for row in await rt.store.read(sched_ops.schedule_states)}
    now = rt.clock.now()
    gate = asyncio.Semaphore(PARALLEL)
    known = {} if nexts is None else nexts

    async def one(sched: ScheduleDef, state: Row) -> None:
        watermark = float(state["watermark"]) if state["watermark"] is not None else now
        remembered = known.get(sched.name)
        if remembered is None or remembered[0] != watermark:
            remembered = known[sched.name] = (watermark, sched.next_after(watermark))
        if remembered[1] + sched.jitter_for(remembered[1]) > now:
            return  # its next slot has not come
        async with gate:
            await _fire_schedule(rt, sched, state, now, tick)

    await asyncio.gather(*(one(s, states[name]) for name, s in rt.schedules.items() if name in states))
    return tick


async def _fire_schedule(rt: ScheduleRuntime, sched: ScheduleDef, state: Row, now: float, tick: Tick) -> None:
    watermark = float(state["watermark"]) if state["watermark"] is not None else now
    if state["paused"]:
        # A paused schedule's slots pass by unfired; unpausing does not catch them up.
        if sched.slots_between(watermark, now, 1):
            await rt.store.write(sched_ops.advance, sched.name, now, 0, now)
        return
    due = due_slots(sched, watermark, now)
    for slot, cause in due.fire:
        tick.fired.append(await fire(rt, sched, slot, cause))
    if due.missed:
        tick.missed += due.missed
        log.info("schedule %s: %d missed slot(s) not fired (backfill=%s)", sched.name, due.missed, sched.backfill)
    if due.watermark is not None:
        await rt.store.write(sched_ops.advance, sched.name, due.watermark, due.missed, now)


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
    """The sweep, ticking twice a second (a slot fires at most that late); none without schedules,
    so that an engine whose app declares none pays nothing for it."""
    if not worker.runtime.app.schedules():
        return None
    registered = False
    nexts: dict[str, tuple[float, float]] = {}
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
        return await fire_due(rt, nexts)

    return Sweep("schedules", INTERVAL, tick)


def runtime_for(worker: WorkerRuntime) -> ScheduleRuntime:
    """What the schedule machinery works through in a process that executes runs."""
    return ScheduleRuntime(worker.runtime, worker.worker_id)
