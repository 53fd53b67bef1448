"""What the gate decides on and what it answers: an ``Offer`` in, a ``Decision`` out."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..definitions import WorkflowDef
from ..ids import new_id
from ..origin import origin_columns
from ..plan import GatePlan
from ..store.base import Row, Tx

__all__ = ["Decision", "Offer", "Stage", "admitted", "reoffer"]


@dataclass
class Offer:
    """Everything the pipeline needs, computed outside the transaction (keys, priority, identity)."""

    defn: WorkflowDef
    plan: GatePlan
    ticket: str
    payload: str  # the run payload as JSON (for a batch or keep="all" arrival: the item)
    keys: dict[str, str]
    priority: int
    fair: str | None
    identity: str | None
    idempotency_key: str | None
    run: dict[str, Any]  # the run row template (id, version, patches, recording, ...)
    at: float | None = None
    pending: Row | None = None  # set when the drainer re-offers a parked row
    pauses: dict[str, Row] | None = None  # a snapshot of active pauses (None: read them in the transaction)

    @property
    def workflow(self) -> str:
        return self.defn.name


@dataclass
class Decision:
    """What became of one offer."""

    status: str  # started | existing | queued | dropped | skipped | expired
    ticket: str
    run_id: str | None = None
    pending_id: str | None = None
    mode: str | None = None
    due_at: float | None = None
    key: str | None = None
    retry_after: float | None = None
    reason: str | None = None
    stopped: list[str] = field(default_factory=list)  # runs ended by this decision (singleton eviction)


Stage = Callable[[Tx, Offer, float], Awaitable[Decision | None]]
"""One stage of the pipeline: a ``Decision`` that ends the offer, or ``None`` to pass it on."""


def admitted(plan: GatePlan, run: dict[str, Any], now: float) -> dict[str, Any]:
    """What admission adds to a run row: its failure handler, and its deadline (``timeouts.finish``)."""
    run = {**run, "on_failure": plan.on_failure}
    if plan.finish_timeout is not None:
        run["deadline_at"] = now + plan.finish_timeout
    return run


def reoffer(defn: WorkflowDef, row: Row, run: dict[str, Any]) -> Offer:
    """An offer for a parked row (its keys were computed when it arrived)."""
    return Offer(
        defn=defn,
        plan=defn.gate,
        ticket=row["ticket"],
        payload=row["payload"],
        keys=json.loads(row["keys"]) if row["keys"] else {},
        priority=int(row["priority"]),
        fair=row["fair_key"],
        identity=row["identity"],
        idempotency_key=row["idempotency_key"],
        run={**run, "id": new_id("run"), "retry_of": row["retry_of"], **origin_columns(row)},
        pending=row,
    )
