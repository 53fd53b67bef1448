"""Pressure at the gate per workflow and key: ``FlowRow`` and the ``flow`` read."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from ..store import event_waits, ledger
from ..store import flow as step_flow
from ..store.base import Tx

__all__ = ["FLOW_OUTCOMES", "FlowRow", "flow"]

FLOW_OUTCOMES = ("admitted", "collapsed", "batched", "dropped", "skipped", "expired", "existing")
"""The decisions ``flow`` counts per workflow and key."""


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
    flow_waiting: int = 0  # runs parked with a step waiting for its step flow-control key (waiting_on="flow")
    sources: dict[str, int] = field(default_factory=dict)  # parked starts by where they came from (event:<name>, ...)
    event_waiting: dict[str, int] = field(default_factory=dict)  # runs parked in ctx.wait_for_event, per event

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def flow(tx: Tx, now: float, *, workflow: str | None = None, since: float | None = None) -> list[FlowRow]:
    """One row per (workflow, key) with anything parked, running or decided since ``since`` (``None``: ever).

    A store operation (``store.read(flow, now, ...)``). Every read is bounded by the groups: parked
    starts and decisions are read from their kept counts (an index probe per group finds the oldest
    waiter), slots and running runs as they are now; only a read ``since`` a time walks the ledger
    rows of that period."""
    rows: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"modes": {}, "sources": {}})
    for r in await ledger.flow_pending(tx, workflow):
        entry = rows[(r["workflow"], r["key"])]
        entry["queued"] = entry.get("queued", 0) + int(r["queued"])
        entry["modes"][r["mode"]] = entry["modes"].get(r["mode"], 0) + int(r["queued"])
        if r["source"]:
            entry["sources"][r["source"]] = entry["sources"].get(r["source"], 0) + int(r["queued"])
        if r["oldest"] is not None:  # counts put wrong by hand (a row moved under the triggers) never break a read
            waited = now - float(r["oldest"])
            entry["oldest_waiting"] = max(entry.get("oldest_waiting") or 0.0, waited)
    slotted: set[str] = set()
    for r in await ledger.flow_slots(tx, workflow):
        rows[(r["workflow"], r["key"])]["in_flight"] = int(r["in_flight"])
        slotted.add(r["workflow"])
    for r in await ledger.flow_running(tx, workflow):
        if r["workflow"] not in slotted:
            rows[(r["workflow"], "")]["in_flight"] = int(r["in_flight"])
    for r in await step_flow.parked_runs(tx, workflow):
        rows[(r["workflow"], "")]["flow_waiting"] = int(r["n"])
    for r in await event_waits.waiting_per_event(tx, workflow):
        rows[(r["workflow"], "")].setdefault("event_waiting", {})[r["name"]] = int(r["waiting"])
    if since is None:
        decided = await ledger.flow_counts(tx, workflow)
    else:
        decided = await ledger.flow_since(tx, workflow, since)
    for r in decided:
        if r["outcome"] in FLOW_OUTCOMES:
            entry = rows[(r["workflow"], r["key"])]
            entry[r["outcome"]] = entry.get(r["outcome"], 0) + int(r["n"])
    return [FlowRow(workflow=wf, key=key, **values) for (wf, key), values in sorted(rows.items())]
