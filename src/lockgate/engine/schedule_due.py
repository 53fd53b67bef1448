"""Which slots of one schedule fire now, and firing them: the sweep's step for each due schedule.

Slots late by at most ``GRACE`` are on time (a tick, a takeover after a crash). Older ones
were missed while nothing ran, and ``backfill`` decides: ``None`` fires only the most recent
of them, ``"all"`` each, a window those within it. The rest count as ``missed``.

After firing, the schedule's row records its new watermark and ``next_at``, the instant the
sweep looks at it again (its next slot, jitter added): the sweep reads only rows whose
``next_at`` has come, through an index, so its work follows the slots due.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..schedule import ScheduleDef
from ..store import schedules as sched_ops
from ..store.base import Row
from .firing import Fired, ScheduleRuntime, fire

__all__ = ["GRACE", "MAX_PER_TICK", "Due", "due_slots", "fire_schedule"]

log = logging.getLogger("lockgate.schedules")

GRACE = 60.0
"""Seconds a slot may be late and still count as on time (not missed)."""

MAX_PER_TICK = 1000
"""Slots one schedule fires per tick at most; a longer backfill goes on at the next tick."""


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


async def fire_schedule(rt: ScheduleRuntime, sched: ScheduleDef, state: Row, now: float) -> tuple[list[Fired], int]:
    """Fire the slots of ``sched`` (stored as ``state``) due at ``now``, then move its watermark and
    ``next_at`` on; what each slot became and how many were missed."""
    watermark = float(state["watermark"]) if state["watermark"] is not None else now
    revision = int(state["revision"])
    if state["paused"]:
        # A paused schedule's slots pass by unfired; unpausing does not catch them up.
        await rt.store.write(sched_ops.advance, sched.name, now, 0, now, None, revision)
        return [], 0
    due = due_slots(sched, watermark, now)
    fired: list[Fired] = []
    for slot, cause in due.fire:
        outcome = await fire(rt, sched, slot, cause)
        fired.append(outcome)
        if outcome.status == "deleted":
            return fired, 0
    if due.missed:
        log.info("schedule %s: %d missed slot(s) not fired (backfill=%s)", sched.name, due.missed, sched.backfill)
    upto = watermark if due.watermark is None else max(watermark, due.watermark)
    await rt.store.write(sched_ops.advance, sched.name, upto, due.missed, now, sched.next_due(upto), revision)
    return fired, due.missed
