"""Store operations for schedules: their durable state and the firing ledger.

The firing row is the claim: ``claim_firing`` inserts it under a unique
``(schedule, scheduled_at, manual)``, so of every replica that reaches a slot exactly one
gets the row back. Everything after the claim moves that row from status to status with
``move_firing``, which only moves a row still in the status its caller saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import timed
from .base import Row, Tx

__all__ = [
    "LIVE",
    "Declared",
    "advance",
    "advance_many",
    "claim_firing",
    "claim_firings",
    "create_schedule",
    "delete_schedule",
    "due_schedules",
    "firing_counts",
    "firings_at",
    "firings_of",
    "forget_firings",
    "live_firings",
    "live_firings_of",
    "lock_schedule",
    "lock_schedules",
    "move_firing",
    "move_firings",
    "open_firings",
    "register",
    "replace_schedule",
    "schedule_state",
    "schedule_states",
    "schedules_behind",
    "schedules_named",
    "schedules_page",
    "set_paused",
    "take_buffered",
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
    next_due: Callable[[float], float | None] = field(default=lambda watermark: watermark, compare=False)
    """When the first slot after a watermark fires (``None``: never again)."""


async def register(tx: Tx, declared: Sequence[Declared], now: float, *, orphan_others: bool) -> None:
    """Record ``declared``; with ``orphan_others`` mark every other stored declared schedule orphaned."""
    for d in declared:
        known = await tx.one("schedule_state", {"name": d.name})
        kept = known is not None and known["origin"] == "declared" and known["watermark"] is not None
        watermark = float(known["watermark"]) if kept and known is not None else now
        params = {"name": d.name, "workflow": d.workflow, "spec": d.spec, "timezone": d.timezone, "now": now}
        await tx.execute("schedule_register", {**params, "next_at": d.next_due(watermark)})
    if orphan_others:
        await tx.execute("schedule_orphan", {"names": json.dumps([d.name for d in declared]), "now": now})


async def schedule_states(tx: Tx) -> list[Row]:
    return await tx.execute("schedule_states")


async def schedule_state(tx: Tx, name: str) -> Row | None:
    return await tx.one("schedule_state", {"name": name})


async def lock_schedule(tx: Tx, name: str) -> Row | None:
    """The schedule's row, locked for the rest of the transaction where writers run concurrently."""
    return await tx.one("schedule_lock", {"name": name})


async def lock_schedules(tx: Tx, names: Sequence[str]) -> list[Row]:
    """``lock_schedule`` for many, leaving out (not waiting for) a row another transaction holds."""
    return await tx.execute("schedules_lock_many", {"names": json.dumps(sorted(names))}) if names else []


async def advance(
    tx: Tx, name: str, watermark: float, missed: int, now: float, next_at: float | None, revision: int
) -> None:
    """Slots up to ``watermark`` are dealt with (``missed`` of them passed over); look again at ``next_at``.

    Nothing changes if the schedule's revision is no longer ``revision``.
    """
    params = {"name": name, "watermark": watermark, "missed": missed, "now": now, "next_at": next_at}
    await tx.execute("schedule_advance", {**params, "revision": revision})


async def advance_many(tx: Tx, rows: Sequence[dict[str, Any]], now: float) -> None:
    """``advance`` for many schedules (names distinct): each row's ``name``, ``watermark``, ``missed``,
    ``next_at`` and ``revision``."""
    if not rows:
        return
    if not tx.rows_in_one:  # a statement is a function call here: one per schedule costs less than the JSON
        for r in rows:
            await tx.execute("schedule_advance", {**r, "now": now})
        return
    await tx.execute("schedules_advance_many", {"rows": json.dumps([_timed(r) for r in rows]), "now": now})


def _timed(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its times as text: read back exactly by either dialect (SQLite's JSON numbers keep 15 digits)."""
    return {k: repr(v) if isinstance(v, float) else v for k, v in row.items()}


async def set_paused(
    tx: Tx, name: str, paused: bool, reason: str | None, now: float, next_at: float | None = None
) -> bool:
    """Pause or unpause ``name`` (unpaused, due again at ``next_at``); whether it exists."""
    params = {"name": name, "paused": int(paused), "reason": reason if paused else None, "now": now}
    params["paused_at"] = now if paused else None
    params["next_at"] = next_at
    return bool(await tx.execute("schedule_pause", params))


async def due_schedules(tx: Tx, now: float, limit: int) -> list[Row]:
    """Schedules to look at by ``now``, the most overdue first (through the index on ``next_at``)."""
    return await tx.execute("schedules_due", {"now": now, "limit": limit})


async def schedules_named(tx: Tx, names: Sequence[str]) -> list[Row]:
    return await tx.execute("schedules_named", {"names": json.dumps(list(names))}) if names else []


async def create_schedule(tx: Tx, row: dict[str, Any]) -> bool:
    """Insert a runtime schedule's row; whether it was new (an existing id is left alone)."""
    return bool(await tx.execute("schedule_create", row))


async def replace_schedule(tx: Tx, row: dict[str, Any], revision: int) -> bool:
    """Write a runtime schedule's new options; whether it was still at ``revision``."""
    return bool(await tx.execute("schedule_replace", {**row, "revision": revision}))


async def delete_schedule(tx: Tx, name: str, now: float) -> bool:
    """Delete runtime schedule ``name`` and skip its firings that never started; whether it existed."""
    if not await tx.execute("schedule_delete", {"name": name}):
        return False
    await tx.execute("firings_drop_waiting", {"schedule": name, "why": "schedule deleted", "now": now})
    return True


async def schedules_page(
    tx: Tx, *, cursor: str, limit: int, workflow: str | None, prefix: str | None, paused: bool | None
) -> list[Row]:
    params = {"cursor": cursor, "limit": limit, "workflow": workflow, "prefix": prefix}
    params["prefix_len"] = len(prefix) if prefix is not None else 0
    params["paused"] = None if paused is None else int(paused)
    return await tx.execute("schedules_page", params)


async def schedules_behind(tx: Tx, cutoff: float) -> Row | None:
    """How many schedules were due before ``cutoff`` and not looked at, and the oldest such instant."""
    return await tx.one("schedules_behind", {"cutoff": cutoff})


async def claim_firing(tx: Tx, firing: dict[str, Any]) -> Row | None:
    """Insert the firing's claim row; the row if this caller won the slot, ``None`` if another had it."""
    return await tx.one("firing_claim", firing)


async def claim_firings(tx: Tx, firings: Sequence[dict[str, Any]]) -> list[Row]:
    """``claim_firing`` for many slots in multi-row statements; the rows this caller won (any order)."""
    return await tx.execute_values("firing_claim", firings) if firings else []


async def live_firings(tx: Tx, schedule: str) -> list[Row]:
    return await tx.execute("firings_live", {"schedule": schedule})


async def live_firings_of(tx: Tx, names: Sequence[str]) -> list[Row]:
    """What the overlap policies of ``names`` need: each claimed or started firing (``schedule``, ``id``,
    ``status``, ``run_id``, ``run_status``) and per schedule one ``buffered`` row whose ``n`` counts them."""
    return await tx.execute("firings_live_of", {"names": json.dumps(sorted(names))}) if names else []


async def open_firings(tx: Tx) -> list[Row]:
    """Every claimed or started firing and the oldest buffered one of each schedule, with its run's id,
    status and end where the run exists."""
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
    """Move a firing from ``expect`` to ``status``; whether it was still in ``expect`` (and the start ``ticket``
    names, if any, is in the database: one a failover lost is not recorded, so the firing is started again)."""
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


async def move_firings(tx: Tx, moves: Sequence[dict[str, Any]]) -> set[int]:
    """``move_firing`` for many firings (ids distinct), each a dict of its arguments (``firing_id``,
    ``expect``, ``status`` and any of the optional ones); the ids that were still in their ``expect``."""
    if not moves:
        return set()
    params = [{**dict.fromkeys(_MOVED), **m, "id": m["firing_id"]} for m in moves]
    for p in params:
        del p["firing_id"]
    if len({p["id"] for p in params}) != len(params):
        raise ValueError("move_firings: a firing moved twice in one call")
    if not tx.rows_in_one:
        return {int(p["id"]) for p in params if await tx.execute("firing_update", p)}
    rows = await tx.execute("firings_update_many", {"moves": json.dumps([_timed(p) for p in params])})
    return {int(r["id"]) for r in rows}


_MOVED = ("why", "run_id", "ticket", "start_status", "started_at", "finished_at")


async def take_firing(tx: Tx, firing_id: int, owner: str, now: float, lease: float) -> Row | None:
    """Take over a claim its claimant left unstarted past its lease; the row, or ``None``."""
    return await tx.one("firing_take", {"id": firing_id, "owner": owner, "now": now, "lease_until": now + lease})


async def take_buffered(tx: Tx, names: Sequence[str], owner: str, now: float, lease: float) -> list[Row]:
    """Claim for ``owner`` (leased) the oldest buffered firing of each of ``names`` (distinct; the caller
    holds their rows and saw nothing of them running); the rows claimed."""
    params = {"names": json.dumps(sorted(names)), "owner": owner, "lease_until": now + lease}
    return await tx.execute("firings_take_buffered", params) if names else []


async def firings_of(tx: Tx, schedule: str, limit: int) -> list[Row]:
    """A schedule's firings, newest claim first."""
    return await tx.execute("firings_of", {"schedule": schedule, "limit": limit})


async def firings_at(tx: Tx, schedule: str, start: float, end: float) -> list[Row]:
    """A schedule's slot firings with ``start <= scheduled_at <= end``."""
    return await tx.execute("firings_at", {"schedule": schedule, "start": start, "end": end})


async def firing_counts(tx: Tx, names: list[str] | None = None) -> list[Row]:
    """Per schedule and status: how many firings, and the newest slot among them (of ``names`` only, if given)."""
    if names is None:
        return await tx.execute("firing_counts")
    return await tx.execute("firing_counts_of", {"names": json.dumps(names)})


async def forget_firings(tx: Tx, cutoff: float, limit: int) -> int:
    """Delete up to ``limit`` finished firings claimed before ``cutoff``; how many. Where the firings are
    partitioned (PostgreSQL), only those of slots older than their oldest partition of one interval: the others
    go with their partition (``timed.retire``), not one by one."""
    before = await timed.before(tx, timed.FIRINGS, cutoff)
    return len(await tx.execute("firings_forget", {"cutoff": cutoff, "before": before, "limit": limit}))
