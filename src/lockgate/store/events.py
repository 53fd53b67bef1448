"""Store operations for domain events: the event log, per-trigger deliveries, cancel-on.

An event and its pending deliveries are written in one transaction (``publish``), so a
crash between publishing and fanning out loses nothing: the fan-out sweep finds the
pending rows. A delivery settles once (``settle_delivery`` changes only a pending row).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from . import event_waits, gate, runs, timed
from .base import Row, Tx
from .shared import LIVE

__all__ = [
    "cancel_on_targets",
    "cancel_parked_for_event",
    "cancel_run_for_event",
    "forget_deliveries",
    "forget_events",
    "get_event",
    "list_deliveries",
    "list_events",
    "mark_swept",
    "pending_deliveries",
    "publish",
    "record_replay",
    "replay_candidates",
    "replay_state",
    "settle_delivery",
    "started_by_key",
    "unswept_events",
]


async def publish(
    tx: Tx,
    event: dict[str, Any],
    deliveries: list[dict[str, Any]],
    keys: Sequence[str] = (),
    claim: event_waits.Claim | None = None,
    *,
    given: bool = False,
) -> tuple[list[Row], int]:
    """Write ``event``, one pending delivery per trigger row of ``deliveries`` and its match ``keys``, and
    wake the parked runs waiting for it (``store/event_waits.py``): ``(those claimed for claim, how many
    others were woken)``. ``given``: the publisher gave the event's id, kept where the events are partitioned
    so that a second publish under it fails (``StoreError``), whichever partition the first is in."""
    if given:
        await tx.execute("insert_event_id", {"id": event["id"], "occurred_at": event["occurred_at"]})
    await tx.execute("insert_domain_event", event)
    for delivery in deliveries:
        await tx.execute("insert_delivery", delivery)
    if not keys:
        return [], 0
    at = event["occurred_at"]
    return await event_waits.publish_keys(tx, event["id"], at, keys, at, claim)


async def get_event(tx: Tx, event_id: str) -> Row | None:
    return await tx.one("get_domain_event", {"id": event_id})


async def list_events(tx: Tx, name: str | None, since: float | None, limit: int) -> list[Row]:
    """Events, newest first."""
    return await tx.execute("list_domain_events", {"name": name, "since": since, "limit": limit})


async def list_deliveries(tx: Tx, event_id: str) -> list[Row]:
    """The event's deliveries, then its replays (each with ``replay``: 0 for the delivery, n for the nth replay)."""
    rows = [{**r, "replay": 0} for r in await tx.execute("list_deliveries", {"event_id": event_id})]
    return rows + await tx.execute("list_replays", {"event_id": event_id})


# -- replay ----------------------------------------------------------------------------------


async def replay_candidates(tx: Tx, name: str, since: float, until: float, limit: int) -> list[Row]:
    """Events ``name`` published in ``[since, until]``, oldest first."""
    return await tx.execute("replay_candidates", {"name": name, "since": since, "until": until, "limit": limit})


async def replay_state(tx: Tx, event_id: str, trigger: str) -> tuple[Row | None, int]:
    """The event's delivery to ``trigger`` (if any) and how many times it was replayed to it."""
    params = {"event_id": event_id, "trigger_name": trigger}
    delivery = await tx.one("delivery_of", params)
    last = await tx.one("last_replay", params)
    return delivery, int(last["replay"] or 0) if last is not None else 0


async def record_replay(tx: Tx, row: dict[str, Any]) -> bool:
    """Record one replay of an event to a trigger; ``False`` if that replay number was taken meanwhile."""
    return bool(await tx.execute("insert_replay", row))


async def pending_deliveries(tx: Tx, triggers: list[str], limit: int) -> list[Row]:
    """The oldest pending deliveries of ``triggers``, each with its event's columns.

    Another app sharing the store may declare triggers this one does not: those wait for it.
    """
    return await tx.execute("pending_deliveries", {"triggers": json.dumps(triggers), "limit": limit})


async def started_by_key(tx: Tx, delivery_id: str, workflow: str, key: str) -> Row | None:
    """Another delivery that started ``workflow`` under ``key`` (while its row is kept), if any."""
    return await tx.one("started_delivery_by_key", {"id": delivery_id, "workflow": workflow, "idempotency_key": key})


async def settle_delivery(
    tx: Tx,
    delivery_id: str,
    now: float,
    *,
    created_at: float,
    status: str,
    reason: str | None = None,
    idempotency_key: str | None = None,
    outcome: str | None = None,
    run_id: str | None = None,
    ticket: str | None = None,
) -> bool:
    """Move a pending delivery (made at ``created_at``, its event's time: the partition it is in) to ``status``;
    whether it was still pending (and the start ``ticket`` names, if any, is in the database: one a failover
    lost is not recorded, so the delivery is offered again)."""
    params = {
        "id": delivery_id,
        "created_at": created_at,
        "now": now,
        "status": status,
        "reason": reason,
        "idempotency_key": idempotency_key,
        "outcome": outcome,
        "run_id": run_id,
        "ticket": ticket,
    }
    return bool(await tx.execute("settle_delivery", params))


# -- cancel-on -------------------------------------------------------------------------------


async def unswept_events(tx: Tx, limit: int) -> list[Row]:
    """Events the cancel-on sweep has not handled yet, oldest first."""
    return await tx.execute("unswept_events", {"limit": limit})


async def mark_swept(tx: Tx, event_id: str, occurred_at: float, now: float, problem: str | None = None) -> None:
    """Advance the cancel-on watermark past ``event_id``, published at ``occurred_at`` (the partition it is in;
    with ``problem`` when it could not be read)."""
    await tx.execute("mark_event_swept", {"id": event_id, "occurred_at": occurred_at, "now": now, "problem": problem})


async def cancel_on_targets(
    tx: Tx, workflow: str, before: float, after: float | None, limit: int
) -> tuple[list[Row], list[Row]]:
    """Live runs and parked starts of ``workflow`` that arrived in ``[after, before]``."""
    params = {"workflow": workflow, "before": before, "after": after, "limit": limit}
    return await tx.execute("cancel_on_runs", params), await tx.execute("cancel_on_parked", params)


def _report(row: Row, payload: Any, run_id: str | None, reason: str, now: float) -> dict[str, Any]:
    return {
        "workflow": row["workflow"],
        "payload": payload,
        "error_tag": "Cancelled",
        "error_message": reason,
        "run_id": run_id,
        "reason": "cancel-on",
        "failed_at": now,
    }


async def cancel_run_for_event(tx: Tx, run_id: str, event_id: str, reason: str, now: float) -> list[str]:
    """Cancel a live run for an event: run event, ledger row, ``on_failure`` report; the runs that stopped."""
    row = await runs.find_run(tx, run_id)
    if row is None or row["status"] not in LIVE:
        return []
    stopped = await runs.end_run(
        tx,
        run_id,
        row["status"],
        now,
        status="cancelled",
        error_tag="Cancelled",
        error_message=reason,
        event={"reason": reason, "cause": "cancel-on", "event_id": event_id},
    )
    if not stopped:
        return []
    await gate.ledger(
        tx,
        ticket=row["ticket"] or run_id,
        kind="run",
        workflow=row["workflow"],
        control="cancel-on",
        outcome="cancelled",
        reason=reason,
        run_id=run_id,
        at=now,
    )
    if row["on_failure"]:
        report = _report(row, json.loads(row["payload"]), run_id, reason, now)
        await gate.enqueue_failure_report(tx, row["on_failure"], report, now)
    return stopped


async def cancel_parked_for_event(tx: Tx, pending_id: str, reason: str, now: float) -> bool:
    """Discard a parked start for an event, its ledger row ``cancelled``; whether it was.

    No ``on_failure`` report: the start never ran, so nothing of it is left to undo, and it
    is discarded on purpose (a start that expires unstarted is reported: wanted work that
    did not happen). The report goes to a run the event cancelled (``cancel_run_for_event``).
    """
    row = await gate.get_pending(tx, pending_id)
    if row is None or not await gate.delete_pending(tx, pending_id):
        return False
    await gate.ledger_parked(tx, row, "cancelled", reason, now)
    return True


# -- retention -------------------------------------------------------------------------------


async def forget_events(tx: Tx, cutoff: float, limit: int) -> int:
    """Delete up to ``limit`` events published before ``cutoff`` (with the keys waits found them by), but those a
    pending delivery still needs. Where the events are partitioned (PostgreSQL), only those older than their
    oldest partition of one interval: the others go with their partition (``timed.retire``)."""
    before = await timed.before(tx, timed.EVENTS, cutoff)
    forgotten = len(await tx.execute("forget_domain_events", {"cutoff": before, "limit": limit}))
    await event_waits.forget(tx, cutoff, limit)
    return forgotten


async def forget_deliveries(tx: Tx, cutoff: float, limit: int) -> int:
    """Delete up to ``limit`` settled deliveries (and replays) made before ``cutoff`` (ends their dedupe window).
    Where the deliveries are partitioned (PostgreSQL), only those older than their oldest partition of one
    interval: the others go with their partition (``timed.retire``)."""
    before = await timed.before(tx, timed.DELIVERIES, cutoff)
    forgotten = len(await tx.execute("forget_deliveries", {"cutoff": before, "limit": limit}))
    return forgotten + len(await tx.execute("forget_replays", {"cutoff": cutoff, "limit": limit}))
