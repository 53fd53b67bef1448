"""Store operations of the admission gate: pending rows, ledger writes, slots, windows, pauses, failure reports."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..ids import new_id
from ..serde import dump_json
from .base import Row, Tx
from .shared import started_data

__all__ = [
    "LEDGER_DEFAULTS",
    "PENDING_DEFAULTS",
    "Slot",
    "WindowQueue",
    "active_pause",
    "add_window_hit",
    "admit_parked",
    "bucket_state",
    "cancel_parked",
    "delete_pending",
    "enqueue_failure_report",
    "free_passed_slots",
    "free_slot",
    "free_slots",
    "get_pending",
    "holds_slot",
    "insert_pending",
    "ledger",
    "ledger_parked",
    "ledgers",
    "list_pauses",
    "lock_key",
    "open_groups",
    "park_arrivals",
    "pause",
    "pause_in",
    "pending_by_ids",
    "quiet_slot_frees",
    "refold_pending",
    "release_paused",
    "retake_slot",
    "run_columns",
    "set_bucket",
    "slot_queues",
    "slots_in_scope",
    "slots_in_use",
    "unpause",
    "wake_drainers",
    "window_opens",
    "window_queues",
]

Slot = tuple[str, str]
"""A concurrency slot's ``(scope, key)``."""

LEDGER_DEFAULTS: dict[str, Any] = {
    "control": None,
    "key": None,
    "reason": None,
    "folded": 1,
    "waited": None,
    "pending_id": None,
    "run_id": None,
    "source": None,  # where the start came from (origin.py): set on arrival rows
    "trace_id": None,
}
PENDING_DEFAULTS: dict[str, Any] = {
    "hold_scope": None,
    "hold_key": None,
    "group_key": None,
    "singleton_key": None,
    "items": None,
    "keys": None,
    "identity": None,
    "idempotency_key": None,
    "folded": 1,
    "priority": 0,
    "fair_key": None,
    "on_failure": None,
    "retry_of": None,
    "source": None,  # where the start came from (origin.py), copied onto the run it becomes
    "trace_id": None,
    "subject": None,
    "due_at": None,
    "expires_at": None,
}


async def ledger(tx: Tx, **row: Any) -> int:
    """Write one decision; returns its id (arrival order)."""
    return await tx.insert("insert_ledger", {**LEDGER_DEFAULTS, **row})


async def ledgers(tx: Tx, rows: list[dict[str, Any]]) -> None:
    """Write many decisions at once (ids in list order), without waiting for their ids."""
    await tx.execute_values("insert_ledger_rows", [{**LEDGER_DEFAULTS, **row} for row in rows])


async def ledger_parked(tx: Tx, row: Row, outcome: str, reason: str | None, now: float) -> int:
    """Write what became of the parked ``row``: a ``drain`` decision under its first ticket."""
    return await ledger(
        tx,
        ticket=row["ticket"],
        kind="drain",
        workflow=row["workflow"],
        control=row["mode"],
        key=row["hold_key"],
        outcome=outcome,
        reason=reason,
        folded=int(row["folded"]),
        waited=now - float(row["first_at"]),
        pending_id=row["id"],
        at=now,
    )


async def insert_pending(tx: Tx, row: dict[str, Any]) -> None:
    await tx.execute("insert_pending", {**PENDING_DEFAULTS, **row})


async def park_arrivals(tx: Tx, parked: Sequence[tuple[Row, Row | None]]) -> None:
    """Write many decided arrivals, each a ledger row and, when parked, a pending row, as ``ledger`` then
    ``insert_pending`` would one after the other: ledger ids in list order, each pending row's ``seq`` its
    ledger row's id (found by the server). Multi-row statements whose answers nobody waits for."""
    if not parked:
        return
    await ledgers(tx, [row for row, _ in parked])
    pending = [{**PENDING_DEFAULTS, **row} for _, row in parked if row is not None]
    if pending:
        await tx.execute_values("insert_pending_rows", pending)


async def open_groups(tx: Tx, group_keys: Sequence[str]) -> dict[str, Row]:
    """The open group (a parked row gathering arrivals: debounce, batch) of each of ``group_keys`` that has one."""
    rows = await tx.execute("open_groups", {"group_keys": json.dumps(list(group_keys))})
    return {r["group_key"]: r for r in rows}


async def refold_pending(tx: Tx, row: Row) -> None:
    """Write where folds left the group row ``row`` (its payload, items, count, due time, ...)."""
    await tx.execute(
        "refold_pending",
        {
            k: row[k]
            for k in (
                "id",
                "payload",
                "items",
                "identity",
                "idempotency_key",
                "folded",
                "last_at",
                "due_at",
                "keys",
                "priority",
                "fair_key",
            )
        },
    )


async def get_pending(tx: Tx, pending_id: str) -> Row | None:
    return await tx.one("get_pending", {"id": pending_id})


async def delete_pending(tx: Tx, pending_id: str) -> bool:
    return bool(await tx.execute("delete_pending", {"id": pending_id}))


async def window_opens(tx: Tx, scope: str, key: str, since: float, limit: int) -> float | None:
    """``None`` while the window since ``since`` holds fewer than ``limit`` hits, else the ``limit``-th
    most recent hit (the window has room again once it leaves)."""
    # Hits are ranked 1, 2, 3... per key: the limit-th most recent is the newest rank minus limit - 1.
    nth = await tx.scalar("window_nth", {"scope": scope, "key": key, "since": since, "back": limit - 1})
    return None if nth is None else float(nth)


@dataclass
class WindowQueue:
    """One window key as its decider sees it: its newest hits by rank, and whether a start waits there."""

    hits: dict[int, float]  # rank -> at: the newest ``limit`` ranks the key has
    top: int  # the key's newest rank (0: no hit yet)
    ahead: bool  # a start is parked there for the window (throttle)

    def hit(self, at: float, period: float) -> None:
        """As ``add_window_hit``: hits up to ``at - period`` pruned, then ``at`` ranked after the newest left.

        The ranks not fetched are older than every fetched one; with hits ranked in time order
        they are pruned whenever all the fetched ones are, so the newest rank left is known.
        """
        self.hits = {n: t for n, t in self.hits.items() if t > at - period}
        self.top = max(self.hits, default=0) + 1
        self.hits[self.top] = at


async def window_queues(tx: Tx, windows: Sequence[tuple[str, str, int]]) -> dict[Slot, WindowQueue]:
    """For each window ``(scope, key, limit)``: its ``WindowQueue``, with its newest ``limit`` hits; one query."""
    rows = await tx.execute("window_queues", {"windows": json.dumps([list(w) for w in windows])})
    queues = {(scope, key): WindowQueue({}, 0, False) for scope, key, _ in windows}
    for r in rows:
        queue = queues[(r["scope"], r["key"])]
        if r["n"] is None:
            queue.ahead = True
        else:
            n = int(r["n"])
            queue.hits[n] = float(r["at"])
            queue.top = max(queue.top, n)
    return queues


async def add_window_hit(tx: Tx, scope: str, key: str, at: float, period: float) -> None:
    await tx.execute("prune_window", {"scope": scope, "key": key, "before": at - period})
    await tx.execute("add_window_hit", {"scope": scope, "key": key, "at": at})


async def bucket_state(tx: Tx, scope: str, key: str) -> tuple[float, int, float] | None:
    """A token-bucket key's ``(anchor, n, last_at)`` (``gate.rules.Bucket``), if it has had a start."""
    row = await tx.one("bucket_state", {"scope": scope, "key": key})
    return None if row is None else (float(row["anchor"]), int(row["n"]), float(row["last_at"]))


async def set_bucket(tx: Tx, scope: str, key: str, anchor: float, n: int, last_at: float) -> None:
    await tx.execute("set_bucket", {"scope": scope, "key": key, "anchor": anchor, "n": n, "last_at": last_at})


def lock_name(scope: str, key: str) -> str:
    """The name ``lock_key`` locks (``coalesce.with_locks`` declares these)."""
    return f"{scope}\x1f{key}"


async def lock_key(tx: Tx, scope: str, key: str) -> None:
    """Serialise decisions on one (scope, key) across processes (a no-op where the store has one writer)."""
    if not tx.single_writer:  # one writer already decides one transaction at a time
        await tx.execute("lock_key", {"lock": lock_name(scope, key)})


async def quiet_slot_frees(tx: Tx, passing: bool) -> None:
    """``passing``: the slots freed next are passed on in this transaction, and wake no other process's
    drainer (until called again with ``False``); a no-op where the store has one writer."""
    if not tx.single_writer:
        await tx.execute("quiet_slot_frees", {"passing": "on" if passing else ""})


async def wake_drainers(tx: Tx) -> None:
    """Wake the drainer of whichever process holds its lease, as a freed slot would (a no-op on one writer)."""
    if not tx.single_writer:
        await tx.execute("wake_drainers")


async def slots_in_use(tx: Tx, scope: str, key: str) -> int:
    return int(await tx.scalar("slots_in_use", {"scope": scope, "key": key}))


async def slot_queues(tx: Tx, slots: list[Slot]) -> dict[Slot, tuple[bool, int]]:
    """For each slot ``(scope, key)``: whether a start waits there for a slot (``waiting_ahead``), and
    the slots in use (``slots_in_use``); one query for any number."""
    rows = await tx.execute("slot_queues", {"slots": json.dumps(slots)})
    return {(r["scope"], r["key"]): (bool(r["ahead"]), int(r["used"])) for r in rows}


async def slots_in_scope(tx: Tx, scope: str) -> int:
    return int(await tx.scalar("slots_in_scope", {"scope": scope}))


async def free_slot(tx: Tx, run_id: str) -> None:
    await tx.execute("free_slot", {"run_id": run_id})


async def free_slots(tx: Tx, run_ids: list[str]) -> None:
    """``free_slot`` for many runs, in one statement."""
    if len(run_ids) == 1:
        await free_slot(tx, run_ids[0])
    elif run_ids:
        await tx.execute("free_slots", {"ids": json.dumps(run_ids)})


async def free_passed_slots(tx: Tx, run_ids: list[str]) -> bool:
    """``free_slots`` for runs whose end passes their slots on; whether each of them held one.

    Checked only where other processes decide beside this one (``single_writer`` false): a slot
    passes from run to start there without the key's lock (``gate/handoff.py``), which is only
    sound for a slot that was really held.
    """
    if tx.single_writer or not run_ids:
        await free_slots(tx, run_ids)
        return True
    return await tx.expect_rows("free_slots", {"ids": json.dumps(run_ids)}, len(run_ids))


async def retake_slot(tx: Tx, run: Row, now: float) -> None:
    """A run re-opened after it ended (redrive) counts against its concurrency key again."""
    if run["slot_scope"] is None:
        return
    await tx.execute(
        "take_slot",
        {
            "run_id": run["id"],
            "scope": run["slot_scope"],
            "key": run["slot_key"] or "",
            "workflow": run["workflow"],
            "now": now,
            "expires_at": run["deadline_at"],
        },
    )


async def holds_slot(tx: Tx, run_id: str) -> bool:
    """Whether the run holds a concurrency slot now."""
    return bool(int(await tx.scalar("holds_slot", {"run_id": run_id})))


async def pause(tx: Tx, scope: str, reason: str | None, until: float | None, now: float) -> None:
    await tx.execute("upsert_pause", {"scope": scope, "reason": reason, "until": until, "now": now})


async def unpause(tx: Tx, scope: str) -> bool:
    return bool(await tx.execute("delete_pause", {"scope": scope}))


async def list_pauses(tx: Tx, now: float) -> list[Row]:
    return await tx.execute("list_pauses", {"now": now})


def pause_in(pauses: dict[str, Row], scopes: list[str], now: float) -> Row | None:
    """The pause holding any of ``scopes`` in a snapshot of active pauses (an open-ended one first)."""
    found = [p for s in scopes if (p := pauses.get(s)) is not None and (p["until"] is None or p["until"] > now)]
    return max(found, key=lambda p: float("inf") if p["until"] is None else float(p["until"]), default=None)


async def active_pause(tx: Tx, scopes: list[str], now: float) -> Row | None:
    if not scopes:
        return None
    if len(scopes) == 1:
        return await tx.one("pause_of", {"scope": scopes[0], "now": now})
    return await tx.one("key_pauses", {"scopes": json.dumps(scopes), "now": now})


async def enqueue_failure_report(tx: Tx, handler: str, report: dict[str, Any], now: float) -> None:
    """Park a start of the ``on_failure`` handler; the drainer passes it through the handler's gate."""
    ticket = new_id("tkt")
    pending_id = new_id("pnd")
    identity = f"{handler}\x1ffailure:{report['run_id'] or ticket}:{report['reason']}"
    seq = await ledger(
        tx,
        ticket=ticket,
        kind="arrival",
        workflow=handler,
        control="on_failure",
        outcome="queued",
        reason=f"failure report for {report['workflow']} ({report['reason']})",
        pending_id=pending_id,
        at=now,
    )
    await insert_pending(
        tx,
        {
            "id": pending_id,
            "workflow": handler,
            "ticket": ticket,
            "mode": "delayed",
            "stage": "pause",
            "payload": dump_json(report),
            "identity": identity,
            "seq": seq,
            "first_at": now,
            "last_at": now,
            "due_at": now,
        },
    )


async def cancel_parked(tx: Tx, ticket: str, reason: str, now: float) -> Row | None:
    """Cancel the parked start ``ticket`` holds (or folded into): ledger ``cancelled``; the row, or ``None``."""
    arrival = next(
        (r for r in await tx.execute("ledger_for_ticket", {"ticket": ticket}) if r["kind"] == "arrival"), None
    )
    if arrival is None or arrival["pending_id"] is None:
        return None
    row = await get_pending(tx, arrival["pending_id"])
    if row is None or not await delete_pending(tx, row["id"]):
        return None
    await ledger_parked(tx, row, "cancelled", reason, now)
    return row


# -- the drainer's bulk paths ---------------------------------------------------------------


async def pending_by_ids(tx: Tx, ids: list[str]) -> dict[str, Row]:
    """What can still hold each of the parked rows ``ids`` that exist, by id (locked where the store can):
    ``mode, stage, due_at, keys, identity, has_items``."""
    return {r["id"]: r for r in await tx.execute("pending_by_ids", {"ids": json.dumps(ids)})}


def run_columns(template: dict[str, Any]) -> dict[str, Any]:
    """What runs of one workflow admitted by ``admit_parked`` share, from their run template."""
    return {
        "workflow": template["workflow"],
        "version": template.get("version"),
        "patches": template.get("patches", "[]"),
        "recording": template.get("recording", "full"),
        "deadline_at": template.get("deadline_at"),
        "on_failure": template.get("on_failure"),
    }


async def admit_parked(
    tx: Tx,
    admitted: list[tuple[Row, dict[str, Any], Slot | None]],
    now: float,
    claim: tuple[str, float, int] | None = None,
    *,
    locked: bool = False,
) -> list[str]:
    """Admit parked rows no control holds (but a slot, checked to have room), with one statement per table.

    Each row comes with its workflow's ``run_columns`` and the slot its run takes, if any.
    It is written as ``gate.admit.admit`` writes one start: a run (a fresh id as its identity,
    so no run can already hold it) with its slot, its ``run-started`` event, the row's
    ``drain`` ledger row (in the order given), and the row deleted. With ``claim``, ``(owner,
    lease_until, n)``, the first ``n`` runs (all of one workflow) are created claimed by
    ``owner``. Returns the new run ids, in order; refuses when a row is no longer parked
    (``locked``: the caller holds the rows' locks, and the check does not wait for its answer).
    """
    if not admitted:
        return []
    run_ids = [new_id("run") for _ in admitted]
    entries: list[list[str]] = []
    workflows: dict[str, tuple[dict[str, Any], list[list[str]]]] = {}
    slots = False
    for (row, columns, slot), run_id in zip(admitted, run_ids, strict=True):
        name = columns["workflow"]
        entry = [row["id"], run_id, started_data(name, row["ticket"], None)]
        if slot is not None:
            entry += slot
            slots = True
        entries.append(entry)
        workflows.setdefault(name, (columns, []))[1].append(entry)
    encoded = json.dumps(entries)
    owner, lease_until, claims = claim or (None, None, 0)
    if claims and len(workflows) > 1:
        raise ValueError("admit_parked claims runs of one workflow only")
    claimed = {"owner": owner, "lease_until": lease_until, "claims": claims}
    for columns, own in workflows.values():
        mine = encoded if len(workflows) == 1 else json.dumps(own)
        await tx.execute("admit_parked_runs", {**columns, **claimed, "admitted": mine, "now": now})
    params = {"admitted": encoded, "now": now}
    if slots:
        await tx.execute("admit_parked_slots", params)
    await tx.execute("admit_parked_events", params)
    await tx.execute("admit_parked_ledger", params)
    if locked:  # nobody else can have decided them: no check, so COMMIT need not wait for an answer
        await tx.execute("admit_parked_drop", {"admitted": encoded})
    elif len(await tx.execute("admit_parked_delete", {"admitted": encoded})) != len(admitted):
        raise RuntimeError("a parked row was decided elsewhere while it was being admitted")
    return run_ids


async def release_paused(tx: Tx, workflow: str, now: float) -> int:
    """Release every start a workflow pause parked (due now), each with its ``released`` ledger row."""
    released = await tx.execute("release_paused", {"workflow": workflow, "now": now})
    if released:
        await tx.execute("ledger_released", {"ids": json.dumps([r["id"] for r in released]), "now": now})
    return len(released)
