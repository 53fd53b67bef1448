"""What became of one arrival: ``Trace`` and the ``trace`` read."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..clock import to_datetime
from ..store import ledger, runs
from ..store.base import Row, Tx

__all__ = ["Trace", "ledger_entry", "trace"]


@dataclass(frozen=True)
class Trace:
    """What became of one arrival: what holds it now, or which run absorbed it and how that ended."""

    ticket: str
    workflow: str
    outcome: str  # the arrival's own decision
    state: str  # parked | running | succeeded | failed | cancelled | suspended | dropped | skipped | expired | ...
    control: str | None = None
    key: str | None = None
    reason: str | None = None
    position: int | None = None  # 0 = next in its queue
    estimated_admission: datetime | None = None
    absorbed_by: str | None = None  # the ticket of the row a collapsed/batched arrival folded into
    run_id: str | None = None
    run_status: str | None = None
    run_error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    source: str | None = None  # where the start came from (origin.py): event:<name> for a triggered start

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.estimated_admission is not None:
            out["estimated_admission"] = self.estimated_admission.isoformat()
        return out


async def trace(tx: Tx, ticket: str, now: float, concurrency_limits: dict[str, int]) -> Trace | None:
    """Follow ``ticket`` through collapse and batch to its run; ``None`` for an unknown ticket.

    A store operation (``store.read(trace, ticket, now, limits)``); ``concurrency_limits`` maps a
    concurrency scope to its limit, for the admission estimate of a start waiting for a slot."""
    own = await ledger.ledger_for_ticket(tx, ticket)
    arrival = next((r for r in own if r["kind"] == "arrival"), None)
    if arrival is None:
        return None
    history = [ledger_entry(r) for r in own]
    # the row that holds it now: a delayed or paused start may have folded into a debounce or batch since
    pending_id = next((r["pending_id"] for r in reversed(own) if r["pending_id"] is not None), None)
    base = {
        "ticket": ticket,
        "workflow": arrival["workflow"],
        "outcome": arrival["outcome"],
        "control": arrival["control"],
        "key": arrival["key"],
        "reason": arrival["reason"],
        "source": arrival.get("source"),
    }
    run_id = arrival["run_id"]
    absorbed_by = None
    if pending_id is not None:
        later = await ledger.ledger_for_pending(tx, pending_id)
        merged = sorted({r["id"]: r for r in [*own, *later]}.values(), key=lambda r: r["id"])
        history = [ledger_entry(r) for r in merged]
        parked = await ledger.pending_row(tx, pending_id)
        if parked is not None and parked["ticket"] != ticket:
            absorbed_by = parked["ticket"]
        elif parked is None:
            first = next((r for r in later if r["kind"] == "arrival"), None)
            if first is not None and first["ticket"] != ticket:
                absorbed_by = first["ticket"]
        if parked is not None:
            position = await ledger.pending_position(tx, parked)
            eta = await _estimate(tx, parked, position, now, concurrency_limits)
            return Trace(
                **{**base, "control": parked["mode"], "key": parked["hold_key"]},
                state="parked",
                position=position,
                estimated_admission=to_datetime(eta),
                absorbed_by=absorbed_by,
                history=history,
            )
        decided = [r for r in later if r["kind"] == "drain" and r["outcome"] != "queued"]
        if decided:
            last = decided[-1]
            run_id = last["run_id"]
            if run_id is None:
                return Trace(
                    **{**base, "reason": last["reason"]},
                    state=last["outcome"],
                    absorbed_by=absorbed_by,
                    history=history,
                )
    if run_id is None:
        return Trace(**base, state=arrival["outcome"], absorbed_by=absorbed_by, history=history)
    run = await runs.find_run(tx, run_id)
    return Trace(
        **base,
        state=run["status"] if run else "unknown",
        absorbed_by=absorbed_by,
        run_id=run_id,
        run_status=None if run is None else run["status"],
        run_error=None if run is None or run["error_tag"] is None else f"{run['error_tag']}: {run['error_message']}",
        history=history,
    )


async def _estimate(tx: Tx, parked: Row, position: int, now: float, limits: dict[str, int]) -> float | None:
    if parked["due_at"] is not None:
        return max(now, float(parked["due_at"]))
    if parked["mode"] != "concurrency":
        return None  # paused: until someone unpauses
    avg = await ledger.recent_duration(tx, parked["workflow"])
    if avg is None:
        return None
    limit = limits.get(parked["hold_scope"] or "", 1)
    return now + avg * (position // max(1, limit) + 1)


def ledger_entry(row: Row) -> dict[str, Any]:
    """One ledger row as JSON-ready data (``at`` in ISO 8601, ``waited`` in seconds)."""
    return {
        "at": to_datetime(row["at"]).isoformat() if row["at"] is not None else None,  # type: ignore[union-attr]
        "kind": row["kind"],
        "outcome": row["outcome"],
        "control": row["control"],
        "key": row["key"],
        "reason": row["reason"],
        "run_id": row["run_id"],
        "folded": row["folded"],
        "waited": None if row["waited"] is None else timedelta(seconds=float(row["waited"])).total_seconds(),
    }
