"""The drainer: admits what the gate parked once its time or its slot has come.

One replica drains at a time (a sweep lease). Each tick expires starts past
``timeouts.start`` and runs past ``timeouts.finish``, frees slots whose run is gone,
then re-offers due rows and rows waiting for a concurrency slot, in priority order
(ties by arrival; ``fair_by`` groups take turns). A tick first asks one read whether
a start waits for a slot, a slot is held or anything is due, and stops there when none
is. It sleeps until the next due instant or a wake-up (a freed slot, an unpause, a new parked
row), never polling hot.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from typing import Any

from ..clock import wait_event
from ..definitions import WorkflowDef
from ..plan import GatePlan
from ..store import gate, runs, workers
from ..store.base import Row, Tx
from .admission import control_keys
from .pipeline import Decision, admitted, key_pause_scopes, offer, plain_row, reoffer, slot_of
from .rules import concurrency_room
from .runtime import WorkerRuntime
from .stages import room

__all__ = ["Drainer"]

log = logging.getLogger("lockgate.drainer")
BATCH = 1000
CHUNK = 250  # parked rows re-offered per operation (a refusal sends only its own chunk row by row)


class Drainer:
    """Drains the gate's parked rows for one worker process."""

    def __init__(self, worker: WorkerRuntime) -> None:
        self.worker = worker
        self.rt = worker.runtime
        self._wake = asyncio.Event()
        self._lease_until = 0.0
        self.ticks = 0
        # Per concurrency queue (scope, key): admissions each fair_by group has had while it waited there.
        # Round-robin needs to remember whose turn it was; only the lease holder drains, so memory suffices.
        self._served: dict[tuple[str, str], dict[Any, int]] = {}

    def wake(self) -> None:
        self._wake.set()

    @property
    def holds_lease(self) -> bool:
        """Whether this process drains now (it won the drain lease and it has not run out)."""
        return self._lease_until > self.rt.clock.now()

    async def loop(self) -> None:
        worker, rt = self.worker, self.rt
        while worker.running():
            self._wake.clear()
            delay = rt.poll_interval
            try:
                if await self._hold_lease():
                    due = await self.tick()
                    if due is not None:
                        delay = min(delay, max(0.0, due - rt.clock.now()))
                worker.store_recovered()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                worker.store_failed("drainer", exc)
            if delay > 0:
                await wait_event(self._wake, delay)

    async def _hold_lease(self) -> bool:
        """Renew the drain lease when half of it is spent; whether this replica holds it."""
        worker = self.worker
        now = self.rt.clock.now()
        ttl = max(2.0, worker.lease)
        if now < self._lease_until - ttl / 2:
            return True
        won = await self.rt.store.write(workers.acquire_sweep, "drainer", worker.worker_id, now, ttl)
        self._lease_until = now + ttl if won else 0.0
        return bool(won)

    async def tick(self) -> float | None:
        """One pass; returns the next instant something parked falls due (``None``: nothing timed)."""
        rt, store = self.rt, self.rt.store
        self.ticks += 1
        now = rt.clock.now()
        waiting, held, due = await store.read(_probe)
        if not waiting and not held and (due is None or due > now):
            return due  # what the pass reads below would all be empty: no row due, waiting, overdue or orphaned
        defs = rt.app.definitions()
        # The reads are independent: asked together, a tick costs about one read's round trip, not six.
        _, expired, overdue, orphans, due, waiting = await asyncio.gather(
            rt.pauses.refresh(),
            store.read(_expired, now),
            store.read(_overdue, now),
            store.read(_orphans, now),
            store.read(_due, now),
            self._slot_candidates(defs),
        )
        jobs: list[asyncio.Future[Any]] = []
        for row in expired:
            jobs.append(asyncio.ensure_future(store.write(expire, row, "start-timeout", now)))
        for run_id in overdue:
            jobs.append(asyncio.ensure_future(self._finish_timeout(run_id, now)))
        for run_id in orphans:
            jobs.append(asyncio.ensure_future(store.write(_free, run_id)))
        candidates = due + waiting
        seen: set[str] = set()
        ordered = []
        for row in _fair_order(candidates):
            if row["id"] in seen:
                continue
            seen.add(row["id"])
            ordered.append(row)
        work = [(defs.get(row["workflow"]), row) for row in ordered]  # no definition: expires as unregistered
        for i in range(0, len(work), CHUNK):
            jobs.append(asyncio.ensure_future(self._drain(work[i : i + CHUNK], now)))
        if jobs:
            await asyncio.gather(*jobs, return_exceptions=True)
        return await store.read(_next_due)

    async def _drain(self, work: list[tuple[WorkflowDef | None, Row]], now: float) -> None:
        """Re-offer a chunk of rows, in order, as one operation (one statement per table for rows that no
        control holds). If one row's offer refuses, the chunk's operation is undone whole and each row is
        re-offered on its own, so the others are not held back by it."""
        rt = self.rt
        templates: dict[str, dict[str, Any]] = {}
        for defn, _ in work:
            if defn is not None and defn.name not in templates:
                run = rt.new_run_row(defn, "{}")
                del run["id"], run["identity"]  # each row's run gets its own id, and that id as its identity
                templates[defn.name] = run
        pauses = await rt.pauses.snapshot()
        try:
            decisions = await rt.store.write(
                drain_op, [(defn, row["id"]) for defn, row in work], templates, now, pauses
            )
        except Exception as exc:
            log.info("re-offering %d parked row(s) one by one: %s", len(work), exc)
            await asyncio.gather(*(self._reoffer(defn, row, now) for defn, row in work))
            return
        for (defn, row), decision in zip(work, decisions, strict=True):
            if defn is not None:
                self._decided(defn, row, decision)

    def _decided(self, defn: WorkflowDef, row: Row, decision: Decision) -> None:
        served = self._served.get((row["hold_scope"], row["hold_key"]))
        if decision.status == "started" and served is not None and row["fair_key"] in served:
            served[row["fair_key"]] += 1
        self.rt.after_decision(defn, decision)

    async def _reoffer(self, defn: WorkflowDef | None, row: Row, now: float) -> None:
        rt, store = self.rt, self.rt.store
        try:
            if defn is None:
                await store.write(_expire_op, row["id"], "unregistered", now)
                return
            decision: Decision = await store.write(
                _reoffer_op, defn, row["id"], rt.new_run_row(defn, "{}"), now, await rt.pauses.snapshot()
            )
        except Exception as exc:
            log.warning("re-offer of %s (%s) failed: %s", row["ticket"], row["workflow"], exc)
            return
        self._decided(defn, row, decision)

    async def _slot_candidates(self, defs: dict[str, Any]) -> list[Row]:
        """Rows waiting for a concurrency slot, as many per key as the key has room for."""
        store = self.rt.store
        plans: dict[str, GatePlan] = {}
        for d in defs.values():
            if d.gate.concurrency is not None:
                plans.setdefault(d.gate.concurrency_scope, d.gate)

        async def for_key(waiting: Row) -> list[Row]:
            plan = plans.get(waiting["hold_scope"])
            if plan is None:  # no registered workflow holds this scope: its rows expire as unregistered
                return await store.read(_waiting_for, waiting["hold_scope"], waiting["hold_key"], BATCH)
            room = await store.read(_room, plan, waiting["hold_key"])
            if room <= 0:
                return []
            queue = (waiting["hold_scope"], waiting["hold_key"])
            if plan.fair_by is None:
                return await store.read(_waiting_for, *queue, room)
            return self._take_turns(queue, await store.read(_waiting_for, *queue, BATCH), room)

        # Keys are looked at together (a read each is a round trip); their rows are kept in key order.
        rows: list[Row] = []
        for found in await asyncio.gather(*(for_key(w) for w in await store.read(_waiting_keys))):
            rows += found
        return rows

    def _take_turns(self, queue: tuple[str, str], waiting: list[Row], room: int) -> list[Row]:
        """The ``room`` rows whose ``fair_by`` group is next in turn (a group arriving late starts level)."""
        present = {r["fair_key"] for r in waiting}
        served = {g: n for g, n in self._served.get(queue, {}).items() if g in present}
        floor = min(served.values(), default=0)
        self._served[queue] = {g: served.get(g, floor) for g in present}
        return _fair_order(waiting, self._served[queue])[:room]

    async def _finish_timeout(self, run_id: str, now: float) -> None:
        stopped = await self.rt.store.write(fail_overdue, run_id, now)
        self.rt.stopped(stopped, "finish timeout")


def _fair_order(rows: list[Row], served: dict[Any, int] | None = None) -> list[Row]:
    """Priority first (higher first); within a priority, ``fair_by`` groups take turns; then arrival.

    ``served`` says how many turns each group has had already (a group with fewer goes first).
    """
    by_priority: dict[int, list[Row]] = defaultdict(list)
    for row in rows:
        by_priority[int(row["priority"])].append(row)
    ordered: list[Row] = []
    for priority in sorted(by_priority, reverse=True):
        group = sorted(by_priority[priority], key=lambda r: int(r["seq"]))
        turn: dict[Any, int] = defaultdict(int, served or {})
        ranked = []
        for row in group:
            fair = row["fair_key"]
            ranked.append((turn[fair] if fair is not None else 0, int(row["seq"]), row))
            if fair is not None:
                turn[fair] += 1
        ordered += [r for _, _, r in sorted(ranked, key=lambda t: (t[0], t[1]))]
    return ordered


# -- operations ------------------------------------------------------------------------------


async def drain_op(
    tx: Tx,
    work: list[tuple[WorkflowDef | None, str]],
    templates: dict[str, dict[str, Any]],
    now: float,
    pauses: dict[str, Row],
) -> list[Decision]:
    """Re-offer parked rows in the order given, as they are now; a decision per row.

    A row no control can hold (see ``_unheld``) is admitted as the pipeline would, but a run
    of such rows shares one statement per table. Any other row passes the pipeline from its
    stage after the admissions decided before it, so room, windows and the ledger see the
    chunk's decisions in order. A row without a definition (``None``) expires as unregistered.
    """
    current = await gate.pending_by_ids(tx, [pending_id for _, pending_id in work])
    columns: dict[str, dict[str, Any]] = {}
    decisions: list[Decision] = []
    unheld: list[tuple[Row, dict[str, Any], gate.Slot | None]] = []
    at: list[int] = []  # where each of ``unheld`` stands in ``decisions``
    used: dict[gate.Slot, int] = {}  # slots taken per key, read once (until a row takes the pipeline)

    async def admit_unheld() -> None:
        for i, run_id in zip(at, await gate.admit_parked(tx, unheld, now), strict=True):
            decisions[i].run_id = run_id
        unheld.clear()
        at.clear()

    async def take_slot(defn: WorkflowDef, slot: gate.Slot) -> bool:
        taken = used.get(slot)
        if taken is None:
            await gate.lock_key(tx, *slot)
            taken = used[slot] = await gate.slots_in_use(tx, *slot)
        assert defn.gate.concurrency is not None
        if concurrency_room(defn.gate.concurrency, taken) <= 0:
            return False
        used[slot] = taken + 1
        return True

    for defn, pending_id in work:
        state = current.get(pending_id)
        slot = None if defn is None or state is None else _slot_only(defn, state, pauses, now)
        if state is None:  # decided meanwhile (expired, cancelled, another drain)
            decisions.append(Decision("gone", pending_id))
        elif state["due_at"] is not None and state["due_at"] > now:
            decisions.append(Decision("not-due", state["ticket"]))
        elif defn is not None and (_unheld(defn, state) or (slot is not None and await take_slot(defn, slot))):
            shared = columns.get(defn.name)
            if shared is None:
                template = admitted(defn.gate, templates[defn.name], now)
                shared = columns[defn.name] = gate.run_columns(template)
            unheld.append((state, shared, slot))
            at.append(len(decisions))
            decisions.append(Decision("started", state["ticket"]))
        else:
            await admit_unheld()
            used.clear()  # the pipeline may take a slot: count them again
            row = await gate.get_pending(tx, pending_id)
            assert row is not None  # selected (and locked) in this transaction
            if defn is None:
                await expire(tx, row, "unregistered", now)
                decisions.append(Decision("expired", row["ticket"], pending_id=pending_id, reason="unregistered"))
            else:
                decisions.append(await _reoffer_row(tx, defn, row, templates[defn.name], now, pauses))
    await admit_unheld()
    return decisions


def _unheld(defn: WorkflowDef, state: Row) -> bool:
    """Whether no stage from the row's own on can hold, fold, drop or merge it: admitting it is an insert."""
    return defn.gate.bare and plain_row(state)


def _slot_only(defn: WorkflowDef, state: Row, pauses: dict[str, Row], now: float) -> gate.Slot | None:
    """The slot a row waits for when that is all that can hold it, else ``None`` (the pipeline decides).

    So: a workflow whose one control is a per-key concurrency limit (``GatePlan.slot_only``),
    and no key pause holding the row. With room for it, admitting it is the inserts
    ``_unheld`` rows get, and its slot.
    """
    plan = defn.gate
    if not plan.slot_only or not plain_row(state):
        return None
    keys = json.loads(state["keys"])
    if gate.pause_in(pauses, key_pause_scopes(plan, keys), now) is not None:
        return None
    return slot_of(plan, keys)


async def _reoffer_row(
    tx: Tx, defn: WorkflowDef, row: Row, run: dict[str, Any], now: float, pauses: dict[str, Row]
) -> Decision:
    if not row["keys"]:  # a failure report: its keys are computed by the handler's gate
        model = defn.payload_model.model_validate_json(row["payload"])
        row = {**row, "keys": json.dumps(control_keys(defn, defn.gate, model))}
    o = reoffer(defn, row, run)
    o.pauses = pauses
    return await offer(tx, o, now)


async def _reoffer_op(
    tx: Tx, defn: WorkflowDef, pending_id: str, run: dict[str, Any], now: float, pauses: dict[str, Row]
) -> Decision:
    """Re-offer one parked row as it is now (a fold may have moved it since it was selected)."""
    current = await gate.get_pending(tx, pending_id)
    if current is None:  # decided meanwhile (expired, cancelled, another drain)
        return Decision("gone", pending_id)
    if current["due_at"] is not None and float(current["due_at"]) > now:
        return Decision("not-due", current["ticket"])
    return await _reoffer_row(tx, defn, current, run, now, pauses)


async def _expire_op(tx: Tx, pending_id: str, reason: str, now: float) -> bool:
    row = await gate.get_pending(tx, pending_id)
    return row is not None and await expire(tx, row, reason, now)


async def expire(tx: Tx, row: Row, reason: str, now: float) -> bool:
    """End a parked row that will never run: ledger ``expired`` and the failure report."""
    if not await gate.delete_pending(tx, row["id"]):
        return False
    waited = now - float(row["first_at"])
    message = (
        f"waited {waited:.3f}s at the gate ({row['mode']}) past timeouts.start"
        if reason == "start-timeout"
        else f"workflow {row['workflow']!r} is not registered in this process"
    )
    await gate.ledger_parked(tx, row, "expired", reason, now)
    if row["on_failure"]:
        payload: Any = json.loads(row["payload"])
        if row["items"] is not None:
            payload = {"items": [json.loads(i) for i in json.loads(row["items"])]}
        report = {
            "workflow": row["workflow"],
            "payload": payload,
            "error_tag": "StartTimeout" if reason == "start-timeout" else "Unregistered",
            "error_message": message,
            "run_id": None,
            "reason": reason,
            "failed_at": now,
        }
        await gate.enqueue_failure_report(tx, row["on_failure"], report, now)
    return True


async def fail_overdue(tx: Tx, run_id: str, now: float) -> list[str]:
    """Fail a run past ``timeouts.finish`` (tag ``FinishTimeout``); the runs that stopped."""
    row = await runs.find_run(tx, run_id)
    if row is None or row["status"] != "running" or row["deadline_at"] is None or float(row["deadline_at"]) > now:
        return []
    return await runs.end_run(
        tx,
        run_id,
        "running",
        now,
        status="failed",
        error_tag="FinishTimeout",
        error_message="the run exceeded timeouts.finish",
        event={"reason": "finish-timeout", "error_tag": "FinishTimeout"},
    )


async def _free(tx: Tx, run_id: str) -> None:
    await gate.free_slot(tx, run_id)


async def _probe(tx: Tx) -> tuple[bool, bool, float | None]:
    row = await tx.one("drain_probe")
    if row is None:
        return True, True, None
    return bool(row["waiting"]), bool(row["held"]), None if row["at"] is None else float(row["at"])


async def _expired(tx: Tx, now: float) -> list[Row]:
    return await tx.execute("expired_pending", {"now": now, "limit": BATCH})


async def _overdue(tx: Tx, now: float) -> list[str]:
    return [r["id"] for r in await tx.execute("overdue_runs", {"now": now, "limit": BATCH})]


async def _orphans(tx: Tx, now: float) -> list[str]:
    return [r["run_id"] for r in await tx.execute("orphan_slots", {"now": now, "limit": BATCH})]


async def _due(tx: Tx, now: float) -> list[Row]:
    return await tx.execute("due_pending_order", {"now": now, "limit": BATCH})


async def _waiting_keys(tx: Tx) -> list[Row]:
    return await tx.execute("waiting_keys")


async def _waiting_for(tx: Tx, scope: str, key: str, limit: int) -> list[Row]:
    return await tx.execute("waiting_for_key", {"scope": scope, "key": key, "limit": limit})


async def _room(tx: Tx, plan: GatePlan, key: str) -> int:
    return await room(tx, plan, key)


async def _next_due(tx: Tx) -> float | None:
    value = await tx.scalar("next_pending_due")
    return None if value is None else float(value)
