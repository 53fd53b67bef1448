"""Read queries over the gate's ledger and parked starts: what ``flow``, ``trace`` and admission
polling ask of the store.

Each function runs named queries on a transaction and gives rows; the meaning of those rows
(a ``FlowRow``, a ``Trace``, an ``Admission``) is built by the layers above.
"""

from __future__ import annotations

import json

from .base import Row, Tx

__all__ = [
    "flow_counts",
    "flow_pending",
    "flow_running",
    "flow_since",
    "flow_slots",
    "ledger_for_pending",
    "ledger_for_pendings",
    "ledger_for_ticket",
    "ledger_for_tickets",
    "ledger_page",
    "parked_page",
    "pending_position",
    "pending_row",
    "recent_duration",
]


# -- flow ---------------------------------------------------------------------------------------


async def flow_pending(tx: Tx, workflow: str | None) -> list[Row]:
    """Parked starts per workflow, mode and key: ``workflow, mode, key, queued, oldest``."""
    return await tx.execute("flow_pending", {"workflow": workflow})


async def flow_slots(tx: Tx, workflow: str | None) -> list[Row]:
    """Concurrency slots held per workflow and key: ``workflow, key, in_flight``."""
    return await tx.execute("flow_slots", {"workflow": workflow})


async def flow_running(tx: Tx, workflow: str | None) -> list[Row]:
    """Running runs per workflow: ``workflow, in_flight``."""
    return await tx.execute("flow_running", {"workflow": workflow})


async def flow_counts(tx: Tx, workflow: str | None) -> list[Row]:
    """Every decision ever, per workflow, key and outcome (from the folded counts): ``workflow, key, outcome, n``."""
    return await tx.execute("flow_counts", {"workflow": workflow})


async def flow_since(tx: Tx, workflow: str | None, since: float) -> list[Row]:
    """The decisions at or after ``since`` per workflow, key and outcome (walks that period's ledger rows)."""
    return await tx.execute("flow_ledger", {"workflow": workflow, "since": since})


# -- one arrival ----------------------------------------------------------------------------------


async def ledger_for_ticket(tx: Tx, ticket: str) -> list[Row]:
    """The ledger rows of one ticket, oldest first."""
    return await tx.execute("ledger_for_ticket", {"ticket": ticket})


async def ledger_for_pending(tx: Tx, pending_id: str) -> list[Row]:
    """The ledger rows that name the parked row ``pending_id``, oldest first."""
    return await tx.execute("ledger_for_pending", {"pending_id": pending_id})


async def ledger_for_tickets(tx: Tx, tickets: list[str]) -> list[Row]:
    """The ledger rows of every ticket in ``tickets`` (decision columns only), oldest first."""
    return await tx.execute("ledger_for_tickets", {"tickets": json.dumps(tickets)})


async def ledger_for_pendings(tx: Tx, pending_ids: list[str]) -> list[Row]:
    """The ledger rows that name any of the parked rows ``pending_ids`` (decision columns only), oldest first."""
    return await tx.execute("ledger_for_pendings", {"ids": json.dumps(pending_ids)})


async def pending_row(tx: Tx, pending_id: str) -> Row | None:
    """The parked row ``pending_id`` (``None`` once it has drained)."""
    return await tx.one("get_pending", {"id": pending_id})


async def pending_position(tx: Tx, parked: Row) -> int:
    """How many parked starts are ahead of ``parked`` in its queue (0: it is next)."""
    params = {k: parked[k] for k in ("workflow", "mode", "hold_key", "priority", "seq")}
    return int(await tx.scalar("pending_position", params))


async def recent_duration(tx: Tx, workflow: str) -> float | None:
    """The mean duration of ``workflow``'s recent successful runs (``None`` before any)."""
    avg = await tx.scalar("recent_durations", {"workflow": workflow})
    return None if avg is None else float(avg)


# -- pages ------------------------------------------------------------------------------------------


async def ledger_page(
    tx: Tx,
    *,
    workflow: str | None = None,
    ticket: str | None = None,
    kind: str | None = None,
    outcome: str | None = None,
    since: float | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[Row]:
    """Ledger rows matching every given filter, newest first; ``before`` (a row id) pages on."""
    return await tx.execute(
        "inspect_ledger",
        {
            "workflow": workflow,
            "ticket": ticket,
            "kind": kind,
            "outcome": outcome,
            "since": since,
            "before": before,
            "limit": limit,
        },
    )


async def parked_page(
    tx: Tx, *, workflow: str | None = None, mode: str | None = None, after: int | None = None, limit: int = 100
) -> list[Row]:
    """Parked starts matching the filters in arrival order (``seq``); ``after`` (a ``seq``) pages on."""
    return await tx.execute("inspect_pending", {"workflow": workflow, "mode": mode, "after": after, "limit": limit})
