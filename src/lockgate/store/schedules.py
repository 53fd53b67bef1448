"""Store operations for schedules: their durable state and the firing ledger.

The firing row is the claim: ``claim_firing`` inserts it under a unique
``(schedule, scheduled_at, manual)``, so of every replica that reaches a slot exactly one
gets the row back. Everything after the claim moves that row from status to status with
``move_firing``, which only moves a row still in the status its caller saw.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .base import Row, Tx

__all__ = [
    "LIVE",
    "Declared",
    "advance",
    "claim_firing",
    "firing_counts",
    "firings_at",
    "firings_of",
    "forget_firings",
    "live_firings",
    "lock_schedule",
    "move_firing",
    "open_firings",
    "register",
    "schedule_state",
    "schedule_states",
    "set_paused",
    "take_firing",
]

LIVE = ("claimed", "buffered", "started")
"""Statuses of a firing not finished yet."""


@dataclass(frozen=True)
class Declared:
    """What the store keeps of one declaration."""

    name: str
    workflow: str
    spec: str
    timezone: str


async def register(tx: Tx, declared: Sequence[Declared], now: float, *, orphan_others: bool) -> None:
    """Record ``declared``; with ``orphan_others`` mark every other stored schedule orphaned."""
    for d in declared:
        await tx.execute(
            "schedule_register",
            {"name": d.name, "workflow": d.workflow, "spec": d.spec, "timezone": d.timezone, "now": now},
        )
    if orphan_others:
        await tx.execute("schedule_orphan", {"names": json.dumps([d.name for d in declared]), "now": now})


async def schedule_states(tx: Tx) -> list[Row]:
    return await tx.execute("schedule_states")


async def schedule_state(tx: Tx, name: str) -> Row | None:
    return await tx.one("schedule_state", {"name": name})


async def lock_schedule(tx: Tx, name: str) -> Row | None:
    """The schedule's row, locked for the rest of the transaction where writers run concurrently."""
    return await tx.one("schedule_lock", {"name": name})


async def advance(tx: Tx, name: str, watermark: float, missed: int, now: float) -> None:
    """Slots up to ``watermark`` are dealt with; ``missed`` of them were passed over."""
    await tx.execute("schedule_advance", {"name": name, "watermark": watermark, "missed": missed, "now": now})


async def set_paused(tx: Tx, name: str, paused: bool, reason: str | None, now: float) -> bool:
    """Pause or unpause ``name``; whether it exists."""
    params = {"name": name, "paused": int(paused), "reason": reason if paused else None, "now": now}
    params["paused_at"] = now if paused else None
    return bool(await tx.execute("schedule_pause", params))


async def claim_firing(tx: Tx, firing: dict[str, Any]) -> Row | None:
    """Insert the firing's claim row; the row if this caller won the slot, ``None`` if another had it."""
    return await tx.one("firing_claim", firing)


async def live_firings(tx: Tx, schedule: str) -> list[Row]:
    return await tx.execute("firings_live", {"schedule": schedule})


async def open_firings(tx: Tx) -> list[Row]:
    """Every unfinished firing, with its run's id, status and end where the run exists."""
    return await tx.execute("firings_open")


async def move_firing(
    tx: Tx,
    firing_id: int,
    expect: str,
    status: str,
    *,
    why: str | None = None,
    run_id: str | None = None,
    ticket: str | None = None,
    start_status: str | None = None,
    started_at: float | None = None,
    finished_at: float | None = None,
) -> bool:
    """Move a firing from ``expect`` to ``status``; whether it was still in ``expect``."""
    params = {
        "id": firing_id,
        "expect": expect,
        "status": status,
        "why": why,
        "run_id": run_id,
        "ticket": ticket,
        "start_status": start_status,
        "started_at": started_at,
        "finished_at": finished_at,
    }
    return bool(await tx.execute("firing_update", params))


async def take_firing(tx: Tx, firing_id: int, owner: str, now: float, lease: float) -> Row | None:
    """Take over a claim its claimant left unstarted past its lease; the row, or ``None``."""
    return await tx.one("firing_take", {"id": firing_id, "owner": owner, "now": now, "lease_until": now + lease})


async def firings_of(tx: Tx, schedule: str, limit: int) -> list[Row]:
    """A schedule's firings, newest claim first."""
    return await tx.execute("firings_of", {"schedule": schedule, "limit": limit})


async def firings_at(tx: Tx, schedule: str, start: float, end: float) -> list[Row]:
    """A schedule's slot firings with ``start <= scheduled_at <= end``."""
    return await tx.execute("firings_at", {"schedule": schedule, "start": start, "end": end})


async def firing_counts(tx: Tx) -> list[Row]:
    """Per schedule and status: how many firings, and the newest slot among them."""
    return await tx.execute("firing_counts")


async def forget_firings(tx: Tx, cutoff: float, limit: int) -> int:
    """Delete up to ``limit`` finished firings claimed before ``cutoff``; how many."""
    return len(await tx.execute("firings_forget", {"cutoff": cutoff, "limit": limit}))
