"""Firing one schedule slot: claim it, apply the overlap policy, start the run, record the ledger.

Everything here reaches the rest of the process through ``ScheduleRuntime``: the ``Runtime``
seam (its store, clock and declarations; a start goes through ``gate/admission.admit`` with
it, and a cancel is the store's ``cancel_run`` followed by the seam's ``stopped``) and the
owner its claims are recorded under. The periodic sweep (``sweeps/schedules.py``) and the
operator verbs (``engine/schedules.py``) both fire through ``fire``; ``firing_settle.py``
moves firings along as their runs end.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..clock import Clock
from ..gate.admission import admit
from ..gate.runtime import Runtime
from ..handles import RunHandle
from ..origin import starting_from
from ..schedule import ScheduleDef, slot_key
from ..store import Store, runs
from ..store import schedules as sched_ops
from ..store.base import Row, Tx

__all__ = [
    "CLAIM_LEASE",
    "ENDED",
    "Fired",
    "ScheduleRuntime",
    "cancel_run",
    "claim_row",
    "fire",
    "overlap",
    "running",
    "start_claimed",
    "start_claimed_many",
    "start_run",
]

log = logging.getLogger("lockgate.schedules")

CLAIM_LEASE = 5.0
"""Seconds a claimed slot waits for its claimant to start it before another replica takes it over."""

ENDED = {"succeeded": "succeeded", "failed": "failed", "cancelled": "cancelled"}
"""A run's final statuses, and the status each leaves its firing in."""


@dataclass(frozen=True, slots=True)
class ScheduleRuntime:
    """What firing schedules needs: the process's ``Runtime`` and the owner of its claims."""

    runtime: Runtime
    owner: str
    """Recorded on each claim (the worker's id; ``client`` for a process that executes nothing)."""

    @property
    def store(self) -> Store:
        return self.runtime.store

    @property
    def clock(self) -> Clock:
        return self.runtime.clock

    @property
    def schedules(self) -> Mapping[str, ScheduleDef]:
        """The declared schedules (validated with the workflows at boot)."""
        return self.runtime.app.schedules()


async def start_run(rt: ScheduleRuntime, workflow: str, payload: Any, idempotency_key: str) -> RunHandle:
    """Offer a firing's start to the gate, as ``Client.start`` does (not blocking)."""
    return await admit(
        rt.runtime, workflow, payload, at=None, wait=False, idempotency_key=idempotency_key, flow_control=None
    )


async def cancel_run(rt: ScheduleRuntime, run_id: str, reason: str) -> None:
    """Cancel ``run_id`` as ``Client.cancel`` does: the store's verb, then stop it where it runs."""
    stopped = await rt.store.write(runs.cancel_run, run_id, reason, rt.clock.now())
    rt.runtime.stopped(stopped, "cancelled")


@dataclass(frozen=True)
class Fired:
    """What became of one slot: ``taken`` when another claimant had it; else the firing's status."""

    schedule: str
    scheduled_at: float
    status: str  # taken | deleted | skipped | buffered | started | failed
    why: str | None = None
    run_id: str | None = None
    ticket: str | None = None
    firing_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "scheduled_at": self.scheduled_at,
            "status": self.status,
            "why": self.why,
            "run_id": self.run_id,
            "ticket": self.ticket,
            "firing_id": self.firing_id,
        }


def source_of(schedule: str) -> str:
    """The source a schedule's starts are recorded with."""
    return f"schedule:{schedule}"


def claim_row(
    rt: ScheduleRuntime, sched: ScheduleDef, slot: float, cause: str, now: float, claim_space: int = 0
) -> dict[str, Any]:
    """The claim row of ``slot`` of ``sched`` (``claim_space``: a manual run's own number; 0 for a slot)."""
    key = slot_key(sched.name, slot) + (f"#manual-{claim_space}" if claim_space else "")
    return {
        "schedule": sched.name,
        "scheduled_at": slot,
        "manual": claim_space,
        "cause": cause,
        "workflow": sched.workflow,
        "source": source_of(sched.name),
        "identity": f"{sched.workflow}\x1f{key}",
        "idempotency_key": key,
        "owner": rt.owner,
        "lease_until": now + CLAIM_LEASE,
        "now": now,
    }


def overlap(
    sched: ScheduleDef, others: Sequence[Mapping[str, Any]], waiting: int = 0
) -> tuple[str | None, str | None, list[str]]:
    """What ``sched``'s overlap policy makes of a slot just claimed, given its other live firings (each
    with its ``status``, ``run_status`` and ``run_id``; ``waiting`` more buffered ones only counted):
    ``skipped`` or ``buffered`` and why, or ``None`` to start it, after cancelling the runs listed
    (``cancel_other``: only runs this schedule started)."""
    running_now = [f for f in others if running(f)]
    buffered = waiting + sum(1 for f in others if f["status"] == "buffered")
    if not running_now and not buffered:
        return None, None, []
    if sched.on_overlap == "skip":
        return "skipped", "overlap", []
    if sched.on_overlap == "buffer":
        if buffered >= sched.buffer_limit:
            return "skipped", "buffer full", []
        return "buffered", None, []
    return None, None, [f["run_id"] for f in running_now if f["run_id"]]


def running(firing: Mapping[str, Any]) -> bool:
    """Whether a live firing (its ``status`` and its run's ``run_status``) holds its schedule busy: a claim
    not started yet, or a start whose run has not ended (or is not admitted yet)."""
    return firing["status"] == "claimed" or (firing["status"] == "started" and firing["run_status"] not in ENDED)


async def fire(rt: ScheduleRuntime, sched: ScheduleDef, slot: float, cause: str, *, manual: bool = False) -> Fired:
    """Claim ``slot`` of ``sched`` and, if this caller won it, fire it under the overlap policy.

    A manual firing (an operator's run-now) has its own claim space and ignores the policy.
    """
    now = rt.clock.now()
    # A manual run claims in a space of its own: a number no other manual run of the instant has.
    claim_space = secrets.randbits(52) + 1 if manual else 0
    firing = claim_row(rt, sched, slot, cause, now, claim_space)

    async def claim(tx: Tx) -> tuple[Row | None, str | None, str | None, list[str]]:
        if await sched_ops.lock_schedule(tx, sched.name) is None:
            return None, "deleted", None, []  # deleted since it was read: none of its slots fire any more
        row = await sched_ops.claim_firing(tx, firing)
        if row is None or manual:
            return row, None, None, []
        others = [f for f in await sched_ops.live_firings(tx, sched.name) if f["id"] != row["id"]]
        decided, why, to_cancel = overlap(sched, others)
        if decided is not None:
            finished = now if decided == "skipped" else None
            await sched_ops.move_firing(tx, row["id"], "claimed", decided, why=why, finished_at=finished)
        return row, decided, why, to_cancel

    row, decided, why, to_cancel = await rt.store.write(claim)
    if row is None:
        return Fired(sched.name, slot, decided or "taken")
    if decided is not None:
        return Fired(sched.name, slot, decided, why=why, firing_id=int(row["id"]))
    for run_id in to_cancel:
        try:
            await cancel_run(rt, run_id, f"superseded by schedule {sched.name!r} firing {slot_key(sched.name, slot)}")
        except Exception as exc:  # it ended meanwhile: nothing left to cancel
            log.debug("schedule %s: cancelling run %s: %s", sched.name, run_id, exc)
    return await start_claimed(rt, sched, row)


async def start_claimed(rt: ScheduleRuntime, sched: ScheduleDef, row: Row, expect: str = "claimed") -> Fired:
    """Start the run of the claimed firing ``row`` and record what the gate answered."""
    return (await start_claimed_many(rt, [(sched, row, expect)]))[0]


async def start_claimed_many(rt: ScheduleRuntime, items: Sequence[tuple[ScheduleDef, Row, str]]) -> list[Fired]:
    """``start_claimed`` for many firings (distinct), each ``(schedule, firing row, the status it is in)``.

    Their starts are offered to the gate at once (admissions queued together share group commits,
    decided together by ``gate/many.py``) and what the gate answered is recorded in one write.
    """

    async def start(sched: ScheduleDef, row: Row) -> RunHandle | Exception:
        try:
            payload = sched.payload_for(float(row["scheduled_at"]))
            with starting_from(row["source"] or source_of(sched.name)):  # the run records schedule:<name>
                return await start_run(rt, sched.workflow, payload, row["idempotency_key"])
        except Exception as exc:
            return exc

    if not items:
        return []
    handles = await asyncio.gather(*(start(sched, row) for sched, row, _ in items))
    now = rt.clock.now()
    moves: list[dict[str, Any]] = []
    out: list[Fired] = []
    for (sched, row, expect), handle in zip(items, handles, strict=True):
        slot, fid = float(row["scheduled_at"]), int(row["id"])
        move: dict[str, Any] = {"firing_id": fid, "expect": expect}
        if isinstance(handle, Exception):
            why = f"{type(handle).__name__}: {handle}"
            log.error("schedule %s: firing of %s failed to start: %s", sched.name, slot_key(sched.name, slot), why)
            moves.append({**move, "status": "failed", "why": why, "finished_at": now})
            out.append(Fired(sched.name, slot, "failed", why=why, firing_id=fid))
            continue
        outcome: str | None
        if handle.status in ("started", "existing", "queued"):
            status, outcome = "started", None
        elif handle.status == "skipped":
            status, outcome = "skipped", f"singleton held by run {handle.run_id}"
        else:
            status, outcome = "failed", f"the gate {handle.status} the start"
        moves.append(
            {
                **move,
                "status": status,
                "why": outcome,
                "run_id": handle.run_id if status == "started" else None,
                "ticket": handle.ticket,
                "start_status": handle.status,
                "started_at": now,
                "finished_at": None if status == "started" else now,
            }
        )
        out.append(
            Fired(sched.name, slot, status, why=outcome, run_id=handle.run_id, ticket=handle.ticket, firing_id=fid)
        )
    if moves:
        moved = await rt.store.write(sched_ops.move_firings, moves)
        for m in moves:
            if m["firing_id"] not in moved and m.get("ticket") is not None:
                # Moved by another replica, or its start is not in the database (a failover lost its commit and
                # this write reached the promoted server): left as it was, it is started again.
                log.info(
                    "schedule firing %s: not moved (moved elsewhere, or its start %s was lost)",
                    m["firing_id"],
                    m["ticket"],
                )
    return out
