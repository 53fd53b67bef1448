"""How the gate settled parked starts: ``admissions(tickets)``, which the run-time machinery polls.

The operator's reads of the ledger (``flow``, ``trace``) live in ``lockgate.inspect``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..store import ledger
from ..store.base import Row, Tx

__all__ = ["Admission", "admissions"]


FINAL = ("admitted", "existing", "skipped", "dropped", "expired", "cancelled")
"""The decisions that settle a parked row for good (``queued``, ``released``: it is still parked)."""


@dataclass(frozen=True)
class Admission:
    """How the gate settled an arrival for good: the run it made or joined, else the outcome that made none."""

    run_id: str | None
    outcome: str | None  # None (and no run): no arrival has that ticket
    reason: str | None = None


async def admissions(tx: Tx, tickets: list[str]) -> dict[str, Admission]:
    """The arrivals among ``tickets`` the gate has settled for good; the others are still parked.

    Followed as ``trace`` follows them: the arrival's row, then the last decision on the
    parked row that holds it now (a collapsed or batched arrival's is its group's).
    """
    own = await ledger.ledger_for_tickets(tx, tickets)
    by_ticket: dict[str, list[Row]] = {}
    for row in own:
        by_ticket.setdefault(row["ticket"], []).append(row)
    holder = {
        t: next((r["pending_id"] for r in reversed(rows) if r["pending_id"] is not None), None)
        for t, rows in by_ticket.items()
    }
    held = sorted({p for p in holder.values() if p is not None})
    later = await ledger.ledger_for_pendings(tx, held) if held else []
    decided: dict[str, Row] = {}
    for row in later:
        if row["kind"] == "drain" and row["outcome"] in FINAL:
            decided[row["pending_id"]] = row  # the last one stands
    out: dict[str, Admission] = {}
    for ticket in tickets:
        arrival = next((r for r in by_ticket.get(ticket, []) if r["kind"] == "arrival"), None)
        if arrival is None:
            out[ticket] = Admission(None, None)
            continue
        pending_id = holder[ticket]
        if pending_id is None:  # decided as it arrived
            out[ticket] = Admission(arrival["run_id"], arrival["outcome"], arrival["reason"])
        elif pending_id in decided:
            last = decided[pending_id]
            out[ticket] = Admission(last["run_id"], last["outcome"], last["reason"])
    return out
