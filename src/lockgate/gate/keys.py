"""The keys an offer is held, counted and locked under, read from its plan and its control keys."""

from __future__ import annotations

import json

from ..plan import GatePlan
from ..store import gate
from ..store.base import Row
from .offer import Offer

__all__ = [
    "batch_group",
    "debounce_group",
    "flow_keys",
    "key_pause_scopes",
    "parked_flow_control",
    "plain_row",
    "primary_key",
    "singleton_key",
    "slot_of",
]


def parked_flow_control(row: Row) -> str | None:
    """The step flow control a parked start was given (kept in its keys as ``$flow``), as its run stores it."""
    text = row.get("keys")
    if not text or '"$flow"' not in text:
        return None
    found = json.loads(text).get("$flow")
    return None if found is None else str(found)


def primary_key(o: Offer) -> str | None:
    """The key an offer is counted under in ``flow()``: its concurrency key, else its first window's, ..."""
    plan = o.plan
    for name in ("concurrency", *(w.name for w in plan.windows), "singleton", "debounce", "batch"):
        if name in o.keys:
            return o.keys[name]
    return None


def singleton_key(o: Offer) -> str | None:
    """The key of the singleton ``o`` competes for (``None``: its workflow has none)."""
    return None if o.plan.singleton is None else f"{o.workflow}\x1f{o.keys.get('singleton', '')}"


def debounce_group(o: Offer) -> tuple[str, str]:
    """The debounce key of ``o`` and the group key of its open group."""
    key = o.keys.get("debounce", "")
    return key, f"debounce:{o.workflow}\x1f{key}"


def batch_group(o: Offer) -> tuple[str, str]:
    """The batch key of ``o`` and the group key of its open batch."""
    key = o.keys.get("batch", "")
    return key, f"batch:{o.workflow}\x1f{key}"


def plain_row(state: Row) -> bool:
    """Whether a parked row itself asks nothing of the pipeline: no identity to check, no items to merge,
    past entry (``pending_by_ids``'s columns)."""
    return (
        bool(state["keys"])  # a failure report's keys (and payload) are checked by the pipeline
        and state["identity"] is None
        and not state["has_items"]
        and state["stage"] not in _ENTRY_STAGES
    )


_ENTRY_STAGES = frozenset(("identity", "pause"))  # re-checked as a row passes them: the pipeline's business


def flow_keys(plan: GatePlan, keys: dict[str, str]) -> list[str]:
    """The flow-control keys a start with control ``keys`` competes under (a key pause on any of them holds it)."""
    found = []
    if plan.concurrency is not None:
        found.append(keys.get("concurrency", "") or plan.concurrency_scope)
        if plan.concurrency.pool:
            found.append(plan.concurrency.pool)
    for w in plan.windows:
        if w.kind == "throttle":
            found.append(keys.get(w.name, "") or w.scope)
    return [k for k in dict.fromkeys(found) if k]


def key_pause_scopes(plan: GatePlan, keys: dict[str, str]) -> list[str]:
    """The pause scopes (``key:<k>``) of which any holds a start with control ``keys``."""
    return [f"key:{k}" for k in flow_keys(plan, keys)]


def slot_of(plan: GatePlan, keys: dict[str, str]) -> gate.Slot:
    """The concurrency slot ``(scope, key)`` a start with control ``keys`` takes."""
    return plan.concurrency_scope, keys.get("concurrency", "")
