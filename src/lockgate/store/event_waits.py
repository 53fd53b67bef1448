"""Store operations for runs that wait on a domain event (``ctx.wait_for_event``).

A publish stores its keys (``matching.leaf_keys``) and wakes the parked runs holding a wait
under one of them, in its own transaction (``publish_keys``). A park writes its waits and
looks once more for an event (``park_waits``); the two take the keys' lock, so one of them
always sees the other: a wait never misses an event that committed as it parked.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .base import Row, Tx

__all__ = [
    "Claim",
    "candidates",
    "consume",
    "delete_waits",
    "forget",
    "lock_for_park",
    "publish_keys",
    "run_waits",
    "waiting_per_event",
    "write_waits",
]


@dataclass(frozen=True)
class Claim:
    """Room a process that executes runs offers the runs a publish of its own wakes: up to ``limit`` of them
    that it takes (``keys`` and ``patches``: ``routing.claim_filter``, as ``claim_runs`` asks) are claimed
    for ``owner`` in the publish's transaction, and executed there at once."""

    owner: str
    lease_until: float
    limit: int
    keys: str
    patches: str


async def publish_keys(
    tx: Tx, event_id: str, occurred_at: float, keys: Sequence[str], now: float, claim: Claim | None = None
) -> tuple[list[Row], int]:
    """Store a published event's keys, claim for ``claim`` the parked runs waiting under them that it takes
    (up to its limit), and wake the others: ``(the runs claimed, how many others were woken)``."""
    params: dict[str, Any] = {"keys": json.dumps(sorted(set(keys))), "event_id": event_id, "now": now}
    params["occurred_at"] = occurred_at
    asked = [("lock_event_keys_shared", params), ("insert_event_keys", params)]
    if claim is not None:
        own = {"owner": claim.owner, "lease_until": claim.lease_until, "limit": claim.limit}
        asked.append(("claim_woken_waiters", {**params, **own, "claim_keys": claim.keys, "patches": claim.patches}))
    results = await tx.execute_all([*asked, ("wake_event_waiters", params)])
    return (results[2] if claim is not None else []), len(results[-1])


async def lock_for_park(tx: Tx, keys: Sequence[str]) -> None:
    """Take the keys a park writes its waits under, exclusively, until the transaction ends."""
    await tx.execute("lock_event_keys", {"keys": json.dumps(sorted(set(keys)))})


async def write_waits(tx: Tx, run_id: str, step_key: str, waits: Sequence[dict[str, Any]], now: float) -> None:
    """Replace the waits of ``run_id``'s operation ``step_key``: ``{key, name, match, since}`` each."""
    await tx.execute("delete_step_waits", {"run_id": run_id, "step_key": step_key})
    for wait in waits:
        await tx.execute("insert_event_wait", {"run_id": run_id, "step_key": step_key, "now": now, **wait})


async def delete_waits(tx: Tx, run_id: str, step_key: str) -> None:
    await tx.execute("delete_step_waits", {"run_id": run_id, "step_key": step_key})


async def candidates(
    tx: Tx, run_id: str, keys: Sequence[str], since: float, after: tuple[float, str] | None, limit: int
) -> list[Row]:
    """Events under ``keys`` from ``since`` on that ``run_id`` has not consumed, oldest first, past ``after``."""
    after_at, after_id = after if after is not None else (since - 1.0, "")
    params = {
        "run_id": run_id,
        "keys": json.dumps(sorted(set(keys))),
        "since": since,
        "after_at": after_at,
        "after_id": after_id,
        "limit": limit,
    }
    return await tx.execute("event_candidates", params)


async def consume(tx: Tx, run_id: str, event_id: str, step_key: str, now: float) -> bool:
    """Mark ``event_id`` consumed by ``run_id``'s wait ``step_key``, which ends; whether it was not yet."""
    params = {"run_id": run_id, "event_id": event_id, "step_key": step_key, "now": now}
    fresh = bool(await tx.execute("consume_event", params))
    await tx.execute("delete_step_waits", params)
    return fresh


async def run_waits(tx: Tx, run_id: str) -> list[Row]:
    """The event waits ``run_id`` is parked on (``show``)."""
    return await tx.execute("run_event_waits", {"run_id": run_id})


async def waiting_per_event(tx: Tx, workflow: str | None = None) -> list[Row]:
    """Runs waiting per workflow and event name: ``{workflow, name, waiting}`` rows."""
    return await tx.execute("waiting_per_event", {"workflow": workflow})


async def forget(tx: Tx, cutoff: float, limit: int) -> int:
    """Drop keys of events and consumptions older than ``cutoff``, and the waits of runs that ended."""
    params = {"cutoff": cutoff, "limit": limit}
    done = len(await tx.execute("forget_event_keys", params))
    done += len(await tx.execute("forget_consumed", params))
    return done + len(await tx.execute("forget_stale_waits", params))
