"""The schedule verbs: pause, unpause, run now, backfill (the ``Client`` delegates here).

Each works through a ``ScheduleRuntime`` (the process's ``Runtime`` and the owner of its
claims). A schedule this code does not declare can be paused and unpaused, but not run or
backfilled: its workflow and payload are unknown here. Reads (the list, the ledger) are
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

__all__ = ["BackfillSlot", "backfill", "pause", "run_now"]


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
    """Pause or unpause ``name`` on every replica (durable); unpausing does not catch up paused slots."""
    await _register(rt, name)
    if not await rt.store.write(sched_ops.set_paused, name, paused, reason, rt.clock.now()):
        raise unknown_schedule(rt.schedules, name)


async def run_now(rt: ScheduleRuntime, name: str) -> Fired:
    """Fire ``name`` now, as an operator's manual run (outside the overlap policy)."""
    sched = _declared(rt, name)
    await _register(rt, name)
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
    sched = _declared(rt, name)
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
        await _register(rt, name)
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


def _declared(rt: ScheduleRuntime, name: str) -> ScheduleDef:
    sched = rt.schedules.get(name)
    if sched is None:
        raise unknown_schedule(rt.schedules, name)
    return sched


async def _register(rt: ScheduleRuntime, name: str) -> None:
    sched = rt.schedules.get(name)
    if sched is not None:
        declared = [sched_ops.Declared(sched.name, sched.workflow, sched.spec, sched.timezone)]
        await rt.store.write(sched_ops.register, declared, rt.clock.now(), orphan_others=False)
