"""Firing one schedule slot: claim it, apply the overlap policy, start the run, record the ledger.

Everything here reaches the rest of the process through ``ScheduleRuntime``: the ``Runtime``
seam (its store, clock and declarations; a start goes through ``gate/admission.admit`` with
it, and a cancel is the store's ``cancel_run`` followed by the seam's ``stopped``) and the
owner its claims are recorded under. The periodic sweep (``sweeps/schedules.py``) and the
operator verbs (``engine/schedules.py``) both fire through ``fire``; ``settle`` moves
firings along as their runs end.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..clock import Clock
from ..gate.admission import admit
from ..gate.runtime import Runtime
from ..handles import RunHandle
from ..origin import starting_from
from ..schedule import DEFAULT_MAX_RUNTIME, ScheduleDef, slot_key
from ..store import Store, runs
from ..store import schedules as sched_ops
from ..store.base import Row, Tx
from .schedule_book import ScheduleBook

__all__ = ["Fired", "ScheduleRuntime", "cancel_run", "fire", "settle", "start_claimed", "start_run"]

log = logging.getLogger("lockgate.schedules")

PARALLEL = 256
"""Firings moved at once by ``settle`` (their writes share group commits)."""

CLAIM_LEASE = 5.0
"""Seconds a claimed slot waits for its claimant to start it before another replica takes it over."""


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


async def fire(rt: ScheduleRuntime, sched: ScheduleDef, slot: float, cause: str, *, manual: bool = False) -> Fired:
    """Claim ``slot`` of ``sched`` and, if this caller won it, fire it under the overlap policy.

    A manual firing (an operator's run-now) has its own claim space and ignores the policy.
    """
    now = rt.clock.now()
    # A manual run claims in a space of its own: a number no other manual run of the instant has.
    claim_space = secrets.randbits(52) + 1 if manual else 0
    key = slot_key(sched.name, slot) + (f"#manual-{claim_space}" if manual else "")
    firing = {
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

    async def claim(tx: Tx) -> tuple[Row | None, str | None, str | None, list[str]]:
        if await sched_ops.lock_schedule(tx, sched.name) is None:
            return None, "deleted", None, []  # deleted since it was read: none of its slots fire any more
        row = await sched_ops.claim_firing(tx, firing)
        if row is None or manual:
            return row, None, None, []
        others = [f for f in await sched_ops.live_firings(tx, sched.name) if f["id"] != row["id"]]
        running = [
            f
            for f in others
            if f["status"] == "claimed" or (f["status"] == "started" and f["run_status"] not in _ENDED)
        ]
        if not running and not any(f["status"] == "buffered" for f in others):
            return row, None, None, []
        if sched.on_overlap == "skip":
            await sched_ops.move_firing(tx, row["id"], "claimed", "skipped", why="overlap", finished_at=now)
            return row, "skipped", "overlap", []
        if sched.on_overlap == "buffer":
            waiting = sum(1 for f in others if f["status"] == "buffered")
            if waiting >= sched.buffer_limit:
                await sched_ops.move_firing(tx, row["id"], "claimed", "skipped", why="buffer full", finished_at=now)
                return row, "skipped", "buffer full", []
            await sched_ops.move_firing(tx, row["id"], "claimed", "buffered")
            return row, "buffered", None, []
        # cancel_other: only runs this schedule started, never one started another way.
        return row, None, None, [f["run_id"] for f in running if f["run_id"]]

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
    slot, fid = float(row["scheduled_at"]), int(row["id"])
    try:
        payload = sched.payload_for(slot)
        with starting_from(row["source"] or source_of(sched.name)):  # the run records schedule:<name>
            handle = await start_run(rt, sched.workflow, payload, row["idempotency_key"])
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        log.error("schedule %s: firing of %s failed to start: %s", sched.name, slot_key(sched.name, slot), why)
        await rt.store.write(
            sched_ops.move_firing, fid, expect, "failed", why=why, finished_at=rt.clock.now(), started_at=None
        )
        return Fired(sched.name, slot, "failed", why=why, firing_id=fid)
    now = rt.clock.now()
    outcome: str | None
    if handle.status in ("started", "existing", "queued"):
        status, outcome = "started", None
    elif handle.status == "skipped":
        status, outcome = "skipped", f"singleton held by run {handle.run_id}"
    else:
        status, outcome = "failed", f"the gate {handle.status} the start"
    await rt.store.write(
        sched_ops.move_firing,
        fid,
        expect,
        status,
        why=outcome,
        run_id=handle.run_id if status == "started" else None,
        ticket=handle.ticket,
        start_status=handle.status,
        started_at=now,
        finished_at=None if status == "started" else now,
    )
    return Fired(sched.name, slot, status, why=outcome, run_id=handle.run_id, ticket=handle.ticket, firing_id=fid)


_ENDED = {"succeeded": "succeeded", "failed": "failed", "cancelled": "cancelled"}


async def settle(rt: ScheduleRuntime, book: ScheduleBook | None = None) -> int:
    """Move open firings along: finish those whose run ended, fail those past ``max_runtime``, take
    over claims their claimant abandoned, and start the next buffered firing of a schedule whose
    run ended. How many firings moved."""
    now = rt.clock.now()
    rows = await rt.store.read(sched_ops.open_firings)
    if not rows:
        return 0
    defs = await (book or ScheduleBook(rt.schedules)).named(rt.store, {row["schedule"] for row in rows})
    busy: set[str] = set()
    buffered: dict[str, list[Row]] = {}
    gate = asyncio.Semaphore(PARALLEL)

    async def one(row: Row) -> int:
        """Move one open firing along; 1 if it moved. Each is its own write: they share group commits."""
        sched = defs.get(row["schedule"])
        fid, status = int(row["id"]), row["status"]
        if status == "buffered":
            buffered.setdefault(row["schedule"], []).append(row)
            return 0
        if status == "claimed":
            busy.add(row["schedule"])
            abandoned = row["lease_until"] is not None and float(row["lease_until"]) < now
            if abandoned and sched is None:  # its schedule is gone: nobody starts it any more
                gone = "schedule deleted"
                async with gate:
                    await rt.store.write(sched_ops.move_firing, fid, "claimed", "skipped", why=gone, finished_at=now)
                return 1
            if abandoned and sched is not None:
                async with gate:
                    taken = await rt.store.write(sched_ops.take_firing, fid, rt.owner, now, CLAIM_LEASE)
                    if taken is None:
                        return 0
                    log.warning(
                        "schedule %s: took over the unstarted claim of slot %s", sched.name, row["scheduled_at"]
                    )
                    await start_claimed(rt, sched, taken)
                return 1
            return 0
        run_status = row["run_status"]
        if run_status in _ENDED:
            why = row["run_error"] if run_status == "failed" else None
            finished = row["run_finished_at"]
            async with gate:
                await rt.store.write(
                    sched_ops.move_firing,
                    fid,
                    "started",
                    _ENDED[run_status],
                    why=why,
                    run_id=row["found_run"],
                    finished_at=float(finished) if finished is not None else now,
                )
            return 1
        limit = sched.max_runtime if sched is not None else DEFAULT_MAX_RUNTIME
        if row["started_at"] is not None and now - float(row["started_at"]) > limit:
            run_id = row["found_run"] or row["run_id"]
            async with gate:
                if run_id is not None:
                    try:
                        await cancel_run(rt, run_id, f"schedule {row['schedule']!r}: max_runtime exceeded")
                    except Exception as exc:
                        log.debug("schedule %s: cancelling run %s: %s", row["schedule"], run_id, exc)
                await rt.store.write(
                    sched_ops.move_firing, fid, "started", "failed", why="max_runtime exceeded", finished_at=now
                )
            return 1
        busy.add(row["schedule"])
        if row["run_id"] is None and row["found_run"] is not None:  # a parked start was admitted
            async with gate:
                await rt.store.write(sched_ops.move_firing, fid, "started", "started", run_id=row["found_run"])
        return 0

    moved = sum(await asyncio.gather(*(one(row) for row in rows)))
    # The buffered heads wait for the rows' classification: a schedule still busy starts none.
    for rows_of in buffered.values():
        rows_of.sort(key=lambda r: (float(r["scheduled_at"]), int(r["id"])))

    async def head_of(name: str, waiting: list[Row]) -> None:
        sched = defs.get(name)
        head = waiting[0]
        async with gate:
            if sched is None:
                await rt.store.write(
                    sched_ops.move_firing, int(head["id"]), "buffered", "skipped", why="orphaned", finished_at=now
                )
            else:
                await start_claimed(rt, sched, head, expect="buffered")

    ready = [(name, waiting) for name, waiting in buffered.items() if name not in busy]
    await asyncio.gather(*(head_of(name, waiting) for name, waiting in ready))
    return moved + len(ready)
