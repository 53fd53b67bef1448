"""The schedule verbs: pause, unpause, run now, backfill (the ``Client`` delegates here).

Each works through a ``ScheduleRuntime`` (the process's ``Runtime`` and the owner of its
claims). They apply to declared and runtime schedules alike, except that a schedule declared
by other code than this can be paused and unpaused, but not run or backfilled: its workflow
and payload are unknown here. Creating, changing and deleting runtime schedules is
``schedule_verbs.py``'s. Reads (the list, the ledger) are
``inspect/schedules.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import InvalidArgument
from ..schedule import ScheduleDef, unknown_schedule
from ..store import schedules as sched_ops
from .firing import Fired, ScheduleRuntime, fire
from .schedule_book import ScheduleBook

__all__ = ["BackfillSlot", "backfill", "pause", "register_declared", "run_now"]


@dataclass(frozen=True)
class BackfillSlot:
    """One slot of a backfill: ``would fire`` / ``already fired`` in a dry run, else what firing it did."""

    scheduled_at: datetime
    outcome: str
    fired: Fired | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "scheduled_at": self.scheduled_at.isoformat(),
            "outcome": self.outcome,
            "fired": None if self.fired is None else self.fired.to_dict(),
        }


async def pause(rt: ScheduleRuntime, name: str, paused: bool, reason: str | None = None) -> None:
    """Pause or unpause ``name`` on every replica (durable); unpausing does not catch up paused slots.

    Declared and runtime schedules alike: pausing is an operator's act, not a change of definition.
    """
    await register_declared(rt, name)
    now = rt.clock.now()
    next_at: float | None = None
    if not paused:
        # Due again from now: at its next slot where its definition is known here, else looked at now.
        state = await rt.store.read(sched_ops.schedule_state, name)
        sched = ScheduleBook(rt.schedules).of_row(state) if state is not None else None
        next_at = now if sched is None else sched.next_due(now)
    if not await rt.store.write(sched_ops.set_paused, name, paused, reason, now, next_at):
        raise unknown_schedule(rt.schedules, name)


async def run_now(rt: ScheduleRuntime, name: str) -> Fired:
    """Fire ``name`` now, as an operator's manual run (outside the overlap policy)."""
    sched = await _definition(rt, name)
    await register_declared(rt, name)
    return await fire(rt, sched, rt.clock.now(), "manual", manual=True)


async def backfill(
    rt: ScheduleRuntime, name: str, start: datetime, end: datetime, *, commit: bool = False, limit: int = 1000
) -> list[BackfillSlot]:
    """Fire ``name``'s slots with ``start <= scheduled_at <= end``, oldest first (a dry run unless ``commit``).

    A slot already fired (or claimed) is left alone: its claim row is there. At most ``limit`` slots.
    """
    if start.tzinfo is None or end.tzinfo is None:
        raise InvalidArgument("backfill bounds must be aware datetimes (with a time zone)")
    if end < start:
        raise InvalidArgument("backfill: --to is before --from")
    sched = await _definition(rt, name)
    slots = sched.slots_between(start.timestamp() - 1e-6, end.timestamp(), limit + 1)
    if len(slots) > limit:
        raise InvalidArgument(f"backfill: more than {limit} slots in that range; narrow it")
    taken = (
        {float(r["scheduled_at"]) for r in await rt.store.read(sched_ops.firings_at, name, slots[0], slots[-1])}
        if slots
        else set()
    )
    out: list[BackfillSlot] = []
    if commit:
        await register_declared(rt, name)
    for slot in slots:
        when = sched.local(slot)
        if slot in taken:
            out.append(BackfillSlot(when, "already fired"))
        elif not commit:
            out.append(BackfillSlot(when, "would fire"))
        else:
            fired = await fire(rt, sched, slot, "backfill")
            out.append(BackfillSlot(when, "already fired" if fired.status == "taken" else fired.status, fired))
    return out


async def _definition(rt: ScheduleRuntime, name: str) -> ScheduleDef:
    """``name``'s definition: declared by this code, or a runtime schedule's stored options."""
    sched = (await ScheduleBook(rt.schedules).named(rt.store, [name])).get(name)
    if sched is None:
        raise unknown_schedule(rt.schedules, name)
    return sched


async def register_declared(rt: ScheduleRuntime, name: str) -> None:
    """Record ``name``'s row if this code declares it (a verb may come before any engine ticked)."""
    sched = rt.schedules.get(name)
    if sched is not None:
        declared = [sched_ops.Declared(sched.name, sched.workflow, sched.spec, sched.timezone, sched.next_due)]
        await rt.store.write(sched_ops.register, declared, rt.clock.now(), orphan_others=False)
