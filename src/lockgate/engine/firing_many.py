"""Firing the due slots of many schedules together: the sweep's path for one tick's due schedules.

One transaction per batch locks the schedules' rows (leaving out, not waiting for, any row another
transaction holds: a replica ticking at the same time fires those), claims every due slot
with multi-row inserts under the unique claim, reads the batch's live firings once, applies
each schedule's overlap policy to its slots oldest first (as ``fire`` would, one slot after
the other), records the skipped and buffered firings, and moves each schedule's watermark and
``next_at`` on. A claim to start of a workflow with no gate control is started in that same
transaction (its run and ledger row inserted, the firing moved to ``started``: ``firing_inline``).
The other claims to start are then offered to the gate at once (admissions queued together
share group commits, decided together by ``gate/many.py``) and what it answered is recorded in
one more write (``start_claimed_many``).

A process that dies after the claim's commit and before the start leaves claims that
``settle`` takes over once ``CLAIM_LEASE`` passed, as after a single firing; the start is
idempotent by the slot's key, so a slot still starts one run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..schedule import ScheduleDef, slot_key
from ..store import schedules as sched_ops
from ..store.base import Row, Tx
from .firing import Fired, ScheduleRuntime, cancel_run, claim_row, overlap, start_claimed_many
from .firing_inline import Inline, bare_workflows, start_inline
from .schedule_due import Due

__all__ = ["DueSchedule", "batchable", "fire_many"]

log = logging.getLogger("lockgate.schedules")


@dataclass(frozen=True)
class DueSchedule:
    """One schedule of a batch: its definition, its row as the sweep read it, the slots due now."""

    sched: ScheduleDef
    state: Row
    due: Due


def batchable(sched: ScheduleDef, due: Due) -> bool:
    """Whether ``fire_many`` fires these slots as ``fire`` would one after the other.

    Not ``cancel_other`` with more than one slot: each of those cancels the run the one before it
    started, which only exists once that one's start went through the gate.
    """
    return sched.on_overlap != "cancel_other" or len(due.fire) <= 1


@dataclass
class _Claimed:
    """What the claim transaction decided for one schedule of the batch."""

    fired: list[Fired] = field(default_factory=list)
    to_start: list[tuple[Row, list[str]]] = field(default_factory=list)  # (claim row, runs to cancel first)
    left_out: bool = False
    """Deleted, or held by another transaction: nothing fired nor advanced here."""


async def fire_many(rt: ScheduleRuntime, batch: Sequence[DueSchedule], now: float) -> list[tuple[list[Fired], int]]:
    """Fire the due slots of each schedule of ``batch`` (none paused, each ``batchable``); per schedule,
    what each slot became and how many were missed, in ``batch``'s order."""
    claims = [claim_row(rt, d.sched, slot, cause, now) for d in batch for slot, cause in d.due.fire]
    bare = await bare_workflows(rt, {d.sched.workflow for d in batch})

    async def claim(tx: Tx) -> tuple[list[_Claimed], Inline]:
        locked = {r["name"] for r in await sched_ops.lock_schedules(tx, [d.sched.name for d in batch])}
        left = [d.sched.name for d in batch if d.sched.name not in locked]
        # Left out: deleted, or held by another transaction (which fires or changes it; the next tick looks again)
        held = {r["name"] for r in await sched_ops.schedules_named(tx, left)} if left else set()
        won_rows = await sched_ops.claim_firings(tx, [c for c in claims if c["schedule"] in locked])
        won = {(r["schedule"], float(r["scheduled_at"])): r for r in won_rows}
        new = {int(r["id"]) for r in won_rows}
        live: dict[str, list[dict[str, Any]]] = {}
        waiting: dict[str, int] = {}  # buffered firings, counted
        for r in await sched_ops.live_firings_of(tx, sorted({r["schedule"] for r in won_rows})):
            if r["status"] == "buffered":
                waiting[r["schedule"]] = int(r["n"])
            elif int(r["id"]) not in new:  # the firings there before this batch's claims
                live.setdefault(r["schedule"], []).append(r)
        moves: list[dict[str, Any]] = []
        advances: list[dict[str, Any]] = []
        out: list[_Claimed] = []
        for d in batch:
            name, got = d.sched.name, _Claimed()
            out.append(got)
            if name in held:
                got.left_out = True  # its watermark stays for whoever holds it
                continue
            if name not in locked:  # deleted since it was read: none of its slots fire any more
                got.left_out = True
                if d.due.fire:
                    got.fired.append(Fired(name, d.due.fire[0][0], "deleted"))
                continue
            others, queued = live.get(name, []), waiting.get(name, 0)
            for slot, _ in d.due.fire:
                row = won.get((name, slot))
                if row is None:
                    got.fired.append(Fired(name, slot, "taken"))
                    continue
                decided, why, to_cancel = overlap(d.sched, others, queued)
                fid = int(row["id"])
                if decided is None:
                    got.to_start.append((row, to_cancel))
                    others = [*others, {"status": "claimed", "run_status": None, "run_id": None}]
                    continue
                finished = now if decided == "skipped" else None
                moves.append(
                    {"firing_id": fid, "expect": "claimed", "status": decided, "why": why, "finished_at": finished}
                )
                got.fired.append(Fired(name, slot, decided, why=why, firing_id=fid))
                if decided == "buffered":
                    queued += 1
            advances.append(_advance(d, now))
        plain = [
            (d.sched, row) for d, got in zip(batch, out, strict=True) for row, cancel in got.to_start if not cancel
        ]
        inline, started = await start_inline(tx, rt, plain, bare, now)
        for got in out:  # what started here needs no start after the commit
            got.fired += [inline.fired[int(row["id"])] for row, _ in got.to_start if int(row["id"]) in inline.fired]
            got.to_start = [(row, cancel) for row, cancel in got.to_start if int(row["id"]) not in inline.fired]
        await sched_ops.move_firings(tx, moves + started)
        await sched_ops.advance_many(tx, advances, now)
        return out, inline

    decided, inline = await rt.store.write(claim)
    inline.told(rt)
    for d, got in zip(batch, decided, strict=True):
        for row, to_cancel in got.to_start:
            for run_id in to_cancel:
                key = slot_key(d.sched.name, float(row["scheduled_at"]))
                try:
                    await cancel_run(rt, run_id, f"superseded by schedule {d.sched.name!r} firing {key}")
                except Exception as exc:  # it ended meanwhile: nothing left to cancel
                    log.debug("schedule %s: cancelling run %s: %s", d.sched.name, run_id, exc)
    starting = [(d.sched, row, "claimed") for d, got in zip(batch, decided, strict=True) for row, _ in got.to_start]
    started = iter(await start_claimed_many(rt, starting))
    results: list[tuple[list[Fired], int]] = []
    for d, got in zip(batch, decided, strict=True):
        fired = got.fired + [next(started) for _ in got.to_start]
        fired.sort(key=lambda f: f.scheduled_at)
        if d.due.missed and not got.left_out:
            log.info(
                "schedule %s: %d missed slot(s) not fired (backfill=%s)", d.sched.name, d.due.missed, d.sched.backfill
            )
        results.append((fired, 0 if got.left_out else d.due.missed))
    return results


def _advance(d: DueSchedule, now: float) -> dict[str, Any]:
    """The schedule's new watermark and ``next_at`` once its due slots are claimed (as ``fire_schedule``)."""
    watermark = float(d.state["watermark"]) if d.state["watermark"] is not None else now
    upto = watermark if d.due.watermark is None else max(watermark, d.due.watermark)
    return {
        "name": d.sched.name,
        "watermark": upto,
        "missed": d.due.missed,
        "next_at": d.sched.next_due(upto),
        "revision": int(d.state["revision"]),
    }
