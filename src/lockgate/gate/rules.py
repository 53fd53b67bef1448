"""The gate's rules, each decided in one place: pure functions of the state they judge.

The one-by-one stages, the group-commit decider, the drainer and the hand-off read that
state their own way (a statement each, a set at once, kept in memory) and ask these.
"""

from __future__ import annotations

import json
from typing import Any

from ..buckets import Bucket, bucket_hit, bucket_opens
from ..controls import Concurrency
from ..store.base import Row
from .keys import batch_group, debounce_group
from .offer import Offer

__all__ = [
    "BURST_REASON",
    "Bucket",
    "batch_fold",
    "batch_full",
    "batch_opens",
    "bucket_hit",
    "bucket_opens",
    "concurrency_admits",
    "concurrency_ceiling",
    "concurrency_room",
    "debounce_fold",
    "debounce_opens",
    "folded_into",
    "rate_limit_refusal",
    "throttle_due",
    "window_opens",
]


# -- a concurrency limit -----------------------------------------------------------------------


def concurrency_ceiling(c: Concurrency) -> int:
    """The most runs one key may hold: its ``burst`` where it may borrow idle room, else its ``limit``."""
    return c.limit if c.burst is None else c.burst


def concurrency_room(c: Concurrency, used: int, in_scope: int = 0) -> int:
    """How many more runs fit the control, with ``used`` slots of the key taken and ``in_scope`` of all its
    keys together (read only under a ``total``)."""
    room = concurrency_ceiling(c) - used
    if c.total is not None:
        room = min(room, c.total - in_scope)
    return max(0, room)


def concurrency_admits(c: Concurrency, used: int, waiting: bool, in_scope: int = 0) -> bool:
    """Whether a fresh start takes a slot now: room under the limit, and no start already waiting there."""
    return not waiting and concurrency_room(c, used, in_scope) > 0


# -- a sliding window (throttle, rate limit) ---------------------------------------------------


def window_opens(nth: float | None, period: float, now: float) -> float | None:
    """``None`` when the window has room now, else the instant a slot in it opens.

    ``nth``: the window key's ``limit``-th most recent hit (``None``: it has fewer); the window
    is full while that hit is younger than ``period``.
    """
    return None if nth is None or nth <= now - period else nth + period


def throttle_due(opens: float | None, waiting: bool, now: float) -> float | None:
    """When a fresh start may pass a throttle window (``None``: now): when the window opens, or at once
    behind the starts already waiting there."""
    return now if opens is None and waiting else opens


def rate_limit_refusal(limit: int, period: float, opens: float, now: float) -> tuple[float, str]:
    """A start dropped by a full rate limit window: after how long to retry, and the reason recorded."""
    retry = max(0.0, opens - now)
    return retry, f"{limit} per {period:g}s reached; retry after {retry:.3f}s"


# -- a token bucket (a throttle with a burst): ``lockgate.buckets`` ---------------------------------

BURST_REASON = "passed on burst"
"""The reason a start's admission records when a token-bucket throttle let it through on burst."""


# -- a fold (debounce, batch) ------------------------------------------------------------------


def debounce_opens(o: Offer, now: float) -> dict[str, Any]:
    """The parked row's fields (``_park``'s arguments) of ``o`` opening its debounce group."""
    d = o.plan.debounce
    assert d is not None
    key, group = debounce_group(o)
    return {
        "mode": "debounce",
        "stage": "singleton",
        "due": _debounce_due(o, now, now),
        "scope": "debounce",
        "key": key,
        "group_key": group,
        "items": [o.payload] if d.keep == "all" else None,
    }


def _debounce_due(o: Offer, first_at: float, now: float) -> float:
    """When a debounce group last folded into at ``now`` fires: a period after, capped by its timeout."""
    quiet, cap = now + o.plan.debounce_period, o.plan.debounce_timeout
    return quiet if cap is None else min(quiet, first_at + cap)


def debounce_fold(o: Offer, row: Row, now: float) -> dict[str, Any]:
    """Where folding ``o`` into its open debounce group ``row`` leaves the group row's fields."""
    d = o.plan.debounce
    assert d is not None
    payload, identity, idem = o.payload, o.identity, o.idempotency_key
    items: str | None = row["items"]
    if d.keep == "first":
        payload, identity, idem = row["payload"], row["identity"], row["idempotency_key"]
    elif d.keep == "all":
        items = json.dumps([*json.loads(items or "[]"), o.payload])
        payload, identity, idem = row["payload"], row["identity"], row["idempotency_key"]
    return {
        "payload": payload,
        "items": items,
        "identity": identity,
        "idempotency_key": idem,
        "due_at": _debounce_due(o, float(row["first_at"]), now),
        "keys": json.dumps(o.keys) if d.keep == "last" else row["keys"],
        "priority": max(o.priority, int(row["priority"])),
        "fair_key": row["fair_key"],
    }


def folded_into(row: Row) -> str:
    """The reason an arrival folded into the debounce group ``row`` records."""
    return f"folded into {row['ticket']} ({int(row['folded']) + 1} arrivals)"


def batch_opens(o: Offer, now: float) -> dict[str, Any]:
    """The parked row's fields (``_park``'s arguments) of ``o`` opening its batch."""
    key, group = batch_group(o)
    return {
        "mode": "batch",
        "stage": "singleton",
        "due": now + o.plan.batch_timeout,
        "scope": "batch",
        "key": key,
        "group_key": group,
        "items": [o.payload],
    }


def batch_fold(row: Row, o: Offer) -> tuple[str, int, str]:
    """The open batch ``row``'s items with ``o`` added (as stored, and how many), and the reason its ledger
    row gives."""
    items = [*json.loads(row["items"] or "[]"), o.payload]
    return json.dumps(items), len(items), f"item {len(items)} of batch {row['ticket']}"


def batch_full(o: Offer, size: int) -> bool:
    """Whether ``o``'s batch holding ``size`` items is full: offered at once, in the arrival's transaction."""
    b = o.plan.batch
    assert b is not None
    return size >= b.max_size
