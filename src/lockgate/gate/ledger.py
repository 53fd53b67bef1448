"""Reading the gate's decisions: ``flow()`` per workflow and key, ``trace(ticket)`` per arrival."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..clock import to_datetime
from ..store import runs
from ..store.base import Row, Tx

__all__ = ["Admission", "FlowRow", "Trace", "admissions", "flow", "trace"]


@dataclass(frozen=True)
class FlowRow:
    """Pressure on one workflow and key: what waits, what runs, what was folded or dropped."""

    workflow: str
    key: str
    queued: int = 0
    oldest_waiting: float | None = None  # seconds the oldest parked start has waited
    in_flight: int = 0
    admitted: int = 0
    collapsed: int = 0
    batched: int = 0
    dropped: int = 0
    skipped: int = 0
    expired: int = 0
    existing: int = 0
    modes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def flow(tx: Tx, now: float, *, workflow: str | None = None, since: float | None = None) -> list[FlowRow]:
    """One row per (workflow, key) with anything parked, running or decided since ``since`` (``None``: ever).

    Every read is bounded by what is parked or running now and by the (workflow, key, outcome)
    groups; only a read ``since`` a time walks the ledger rows of that period."""
    rows: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"modes": {}})
    for r in await tx.execute("flow_pending", {"workflow": workflow}):
        entry = rows[(r["workflow"], r["key"])]
        entry["queued"] = entry.get("queued", 0) + int(r["queued"])
        entry["modes"][r["mode"]] = int(r["queued"])
        waited = now - float(r["oldest"])
        entry["oldest_waiting"] = max(entry.get("oldest_waiting") or 0.0, waited)
    slotted: set[str] = set()
    for r in await tx.execute("flow_slots", {"workflow": workflow}):
        rows[(r["workflow"], r["key"])]["in_flight"] = int(r["in_flight"])
        slotted.add(r["workflow"])
    for r in await tx.execute("flow_running", {"workflow": workflow}):
        if r["workflow"] not in slotted:
            rows[(r["workflow"], "")]["in_flight"] = int(r["in_flight"])
    if since is None:
        decided = await tx.execute("flow_counts", {"workflow": workflow})
    else:
        decided = await tx.execute("flow_ledger", {"workflow": workflow, "since": since})
    for r in decided:
        if r["outcome"] in ("admitted", "collapsed", "batched", "dropped", "skipped", "expired", "existing"):
            entry = rows[(r["workflow"], r["key"])]
            entry[r["outcome"]] = entry.get(r["outcome"], 0) + int(r["n"])
    return [FlowRow(workflow=wf, key=key, **values) for (wf, key), values in sorted(rows.items())]


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

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.estimated_admission is not None:
            out["estimated_admission"] = self.estimated_admission.isoformat()
        return out


async def trace(tx: Tx, ticket: str, now: float, concurrency_limits: dict[str, int]) -> Trace | None:
    """Follow ``ticket`` through collapse and batch to its run; ``None`` for an unknown ticket."""
    own = await tx.execute("ledger_for_ticket", {"ticket": ticket})
    arrival = next((r for r in own if r["kind"] == "arrival"), None)
    if arrival is None:
        return None
    history = [_entry(r) for r in own]
    # the row that holds it now: a delayed or paused start may have folded into a debounce or batch since
    pending_id = next((r["pending_id"] for r in reversed(own) if r["pending_id"] is not None), None)
    base = {
        "ticket": ticket,
        "workflow": arrival["workflow"],
        "outcome": arrival["outcome"],
        "control": arrival["control"],
        "key": arrival["key"],
        "reason": arrival["reason"],
    }
    run_id = arrival["run_id"]
    absorbed_by = None
    if pending_id is not None:
        later = await tx.execute("ledger_for_pending", {"pending_id": pending_id})
        history = [_entry(r) for r in sorted({r["id"]: r for r in [*own, *later]}.values(), key=lambda r: r["id"])]
        parked = await tx.one("get_pending", {"id": pending_id})
        if parked is not None and parked["ticket"] != ticket:
            absorbed_by = parked["ticket"]
        elif parked is None:
            first = next((r for r in later if r["kind"] == "arrival"), None)
            if first is not None and first["ticket"] != ticket:
                absorbed_by = first["ticket"]
        if parked is not None:
            position = int(
                await tx.scalar(
                    "pending_position",
                    {
                        "workflow": parked["workflow"],
                        "mode": parked["mode"],
                        "hold_key": parked["hold_key"],
                        "priority": parked["priority"],
                        "seq": parked["seq"],
                    },
                )
            )
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
    avg = await tx.scalar("recent_durations", {"workflow": parked["workflow"]})
    if avg is None:
        return None
    limit = limits.get(parked["hold_scope"] or "", 1)
    return now + float(avg) * (position // max(1, limit) + 1)


def _entry(row: Row) -> dict[str, Any]:
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
    own = await tx.execute("ledger_for_tickets", {"tickets": json.dumps(tickets)})
    by_ticket: dict[str, list[Row]] = {}
    for row in own:
        by_ticket.setdefault(row["ticket"], []).append(row)
    holder = {
        t: next((r["pending_id"] for r in reversed(rows) if r["pending_id"] is not None), None)
        for t, rows in by_ticket.items()
    }
    held = sorted({p for p in holder.values() if p is not None})
    later = await tx.execute("ledger_for_pendings", {"ids": json.dumps(held)}) if held else []
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
