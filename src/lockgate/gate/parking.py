"""The rows a decision writes: its ledger row, and the parked row of a start the gate holds or folds."""

from __future__ import annotations

import json

from ..ids import new_id
from ..store import gate
from ..store.base import Row, Tx
from .keys import singleton_key
from .offer import Decision, Offer

__all__ = ["arrival_rows", "end_parked", "fold", "ledger_row", "park", "record"]


async def record(
    tx: Tx,
    o: Offer,
    now: float,
    *,
    outcome: str,
    control: str | None,
    key: str | None = None,
    reason: str | None = None,
    run_id: str | None = None,
    pending_id: str | None = None,
) -> int:
    """Write the ledger row of one decision on ``o``; its id."""
    return await gate.ledger(
        tx,
        **ledger_row(
            o, now, outcome=outcome, control=control, key=key, reason=reason, run_id=run_id, pending_id=pending_id
        ),
    )


def ledger_row(
    o: Offer,
    now: float,
    *,
    outcome: str,
    control: str | None,
    key: str | None,
    reason: str | None,
    run_id: str | None,
    pending_id: str | None,
) -> Row:
    """The ledger row of one decision on ``o``: its arrival's, or a drain's for a parked row."""
    row = o.pending
    return {
        "ticket": o.ticket,
        "kind": "arrival" if row is None else "drain",
        "workflow": o.workflow,
        "control": control,
        "key": key,
        "outcome": outcome,
        "reason": reason,
        "folded": 1 if row is None else int(row["folded"]),
        "waited": None if row is None else now - float(row["first_at"]),
        "pending_id": pending_id,
        "run_id": run_id,
        "at": now,
        "source": o.run.get("source"),  # a re-offered start's run carries its parked row's (offer.reoffer)
        "trace_id": o.run.get("trace_id"),
    }


async def park(
    tx: Tx,
    o: Offer,
    now: float,
    *,
    mode: str,
    stage: str,
    due: float | None,
    scope: str | None = None,
    key: str | None = None,
    reason: str | None = None,
    group_key: str | None = None,
    items: list[str] | None = None,
) -> Decision:
    """Park ``o`` (a fresh arrival: a new parked row; a parked one: moved on to ``stage``); its decision."""
    row = o.pending
    if row is None:
        ledger, pending = arrival_rows(
            o,
            now,
            mode=mode,
            stage=stage,
            due=due,
            scope=scope,
            key=key,
            reason=reason,
            group_key=group_key,
            items=items,
        )
        await gate.insert_pending(tx, {**pending, "seq": await gate.ledger(tx, **ledger)})
        pending_id = pending["id"]
    else:
        pending_id = row["id"]
        if row["mode"] != mode:
            await record(tx, o, now, outcome="queued", control=mode, key=key, reason=reason, pending_id=pending_id)
        await tx.execute(
            "repark_pending",
            {
                "id": pending_id,
                "mode": mode,
                "stage": stage,
                "hold_scope": scope,
                "hold_key": key,
                "group_key": group_key,
                "payload": o.payload,
                "items": row["items"] if items is None else json.dumps(items),
                "keys": json.dumps(o.keys),
                "identity": o.identity,
                "idempotency_key": o.idempotency_key,
                "due_at": due,
            },
        )
    return Decision("queued", o.ticket, pending_id=pending_id, mode=mode, due_at=due, key=key, reason=reason)


def arrival_rows(
    o: Offer,
    now: float,
    *,
    mode: str,
    stage: str,
    due: float | None,
    scope: str | None = None,
    key: str | None = None,
    reason: str | None = None,
    group_key: str | None = None,
    items: list[str] | None = None,
) -> tuple[Row, Row]:
    """A fresh arrival parked: its ledger row and its pending row, whose ``seq`` is to be the ledger row's id."""
    pending_id = new_id("pnd")
    ledger = ledger_row(
        o,
        now,
        outcome="batched" if mode == "batch" else "queued",
        control=mode,
        key=key,
        reason=reason,
        run_id=None,
        pending_id=pending_id,
    )
    timeout = o.plan.start_timeout
    arrives = due if mode == "delayed" and due is not None else now  # a delayed start arrives at ``at``
    pending = {
        "id": pending_id,
        "workflow": o.workflow,
        "ticket": o.ticket,
        "mode": mode,
        "stage": stage,
        "hold_scope": scope,
        "hold_key": key,
        "group_key": group_key,
        "singleton_key": singleton_key(o),
        "payload": o.payload,
        "items": None if items is None else json.dumps(items),
        "keys": json.dumps(o.keys),
        "identity": o.identity,
        "idempotency_key": o.idempotency_key,
        "priority": o.priority,
        "fair_key": o.fair,
        "on_failure": o.plan.on_failure,
        "retry_of": o.run.get("retry_of"),
        "source": o.run.get("source"),  # where the start came from (origin.py)
        "trace_id": o.run.get("trace_id"),
        "subject": o.run.get("subject"),
        "first_at": now,
        "last_at": now,
        "due_at": due,
        "expires_at": None if timeout is None else arrives + timeout,
    }
    return ledger, pending


async def end_parked(tx: Tx, o: Offer) -> None:
    """Delete ``o``'s parked row, if it had one: its decision ended it."""
    if o.pending is not None:
        await gate.delete_pending(tx, o.pending["id"])


async def fold(
    tx: Tx,
    o: Offer,
    row: Row,
    now: float,
    *,
    payload: str,
    items: str | None,
    identity: str | None,
    idem: str | None,
    due: float | None,
    keys: str | None,
    outcome: str,
    control: str,
    key: str,
    reason: str,
) -> None:
    """Fold the offer into the open group ``row`` (debounce, batch) and record the arrival as folded."""
    await tx.execute(
        "fold_pending",
        {
            "id": row["id"],
            "payload": payload,
            "items": items,
            "identity": identity,
            "idempotency_key": idem,
            "now": now,
            "due_at": due,
            "keys": keys,
            "priority": max(o.priority, int(row["priority"])),
            "fair_key": row["fair_key"],
        },
    )
    await record(tx, o, now, outcome=outcome, control=control, key=key, pending_id=row["id"], reason=reason)
    await end_parked(tx, o)
