"""Store operations for running many workers on one store: workers, their leases, sweep claims, status.

A worker registers with its lease (how long its runs wait for it if it dies); its heartbeat
is written with every lease renewal (``renew_leases``), which extends the lease of each run
it executes, by id and epoch, and releases any other run whose row names it. Its clock
offset from the database's rides with both (``read_clock``, ``follow_database``). Claiming
a run is a change to the run's row and lives in ``runs``; what is
here is the worker's side: its liveness, its hand-backs (``stop_worker``) and the sweep
leases (``acquire_sweep``). ``cluster_status`` is the snapshot behind ``lockgate cluster
status``: which worker holds what, and which look dead.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..clock import Clock, ClockReading, SystemClock
from .base import Row, Store, Tx

__all__ = [
    "Renewal",
    "acquire_sweep",
    "cluster_status",
    "follow_database",
    "list_workers",
    "live_offers",
    "live_workers_on_host",
    "read_clock",
    "register_with_lease",
    "register_worker",
    "renew_leases",
    "stop_worker",
]


async def register_worker(tx: Tx, worker_id: str, host: str, pid: int, now: float) -> None:
    await tx.execute("upsert_worker", {"id": worker_id, "host": host, "pid": pid, "now": now})


async def register_with_lease(
    tx: Tx,
    worker_id: str,
    host: str,
    pid: int,
    now: float,
    lease: float,
    clock_offset: float = 0.0,
    labels: str | None = None,
    offers: str | None = None,
) -> None:
    """Record a starting worker (or a restarted one under the same id), its lease and its clock offset, and
    what it takes: its ``labels`` and its ``offers`` (JSON, see ``routing.py``)."""
    await register_worker(tx, worker_id, host, pid, now)
    params = {"id": worker_id, "lease": lease, "clock_offset": clock_offset, "labels": labels, "offers": offers}
    await tx.execute("set_worker_lease", params)


async def live_offers(tx: Tx, now: float, *, default_lease: float = 15.0) -> list[Row]:
    """The live workers' ``id, labels, offers`` (JSON text; ``None`` for a worker that registered none) and
    ``origin`` (its store's, which its wake-ups name on PostgreSQL; ``None`` on SQLite)."""
    return await tx.execute("live_offers", {"now": now, "default_lease": default_lease})


async def stop_worker(tx: Tx, worker_id: str, now: float, *, clean: bool = True) -> list[str]:
    """Mark a worker stopped and release its runs (a dead worker's entries count as crashes)."""
    released = await tx.execute("release_owner", {"owner": worker_id, "clean": 1 if clean else 0})
    await tx.execute("stop_worker", {"id": worker_id, "now": now})
    return [r["id"] for r in released]


async def list_workers(tx: Tx) -> list[Row]:
    return await tx.execute("list_workers")


async def live_workers_on_host(tx: Tx, host: str, me: str) -> list[Row]:
    return await tx.execute("live_workers_on_host", {"host": host, "id": me})


@dataclass(frozen=True)
class Renewal:
    """What a heartbeat did: the runs renewed (id -> epoch), the ids released, the next suspects."""

    held: dict[str, int]
    released: list[str]
    suspects: dict[str, int]


async def renew_leases(
    tx: Tx,
    owner: str,
    now: float,
    lease_until: float,
    held: dict[str, int],
    suspects: dict[str, int],
    claimed_before: float,
    clock_offset: float = 0.0,
) -> Renewal:
    """The heartbeat: renew the runs ``held`` here (id -> epoch); release the rows naming ``owner`` it does not hold.

    What is renewed is what this worker executes, not every row naming it: after a failover
    that lost commits a row may name a live worker that does not run it, and it must not stay
    ``running`` under that worker for ever. A row naming ``owner``, claimed before
    ``claimed_before`` and not held, is a suspect; a suspect of the last heartbeat (``suspects``)
    still so at the same epoch is released: a claim just made, on its way to its execution, is
    never released by a heartbeat that ran before that execution began.
    """
    await tx.execute("heartbeat", {"id": owner, "now": now, "clock_offset": clock_offset})
    mine = json.dumps(held)
    params = {"owner": owner, "now": now, "lease_until": lease_until, "held": mine}
    rows = await tx.execute("renew_held", params) if held else []
    released = []
    if suspects:
        params = {"owner": owner, "held": mine, "suspects": json.dumps(suspects)}
        released = [r["id"] for r in await tx.execute("release_unheld", params)]
    found = await tx.execute("unheld_runs", {"owner": owner, "held": mine, "before": claimed_before})
    suspected = {r["id"]: int(r["epoch"]) for r in found if r["id"] not in released}
    return Renewal({r["id"]: int(r["epoch"]) for r in rows}, released, suspected)


async def read_clock(tx: Tx) -> ClockReading:
    """The database's clock, read now, against this process's wall clock (at the round trip's middle)."""
    before = time.time()
    database = float(await tx.scalar("database_clock"))
    after = time.time()
    return ClockReading(database=database, offset=(before + after) / 2 - database, round_trip=max(0.0, after - before))


async def follow_database(store: Store, clock: Clock) -> ClockReading | None:
    """Set ``clock`` by the database's (a ``SystemClock`` on a store many hosts share); the reading.

    ``None`` where processes share one machine's clock (SQLite), or ``clock`` is not the
    system's (a test clock).
    """
    if not store.own_clock or not isinstance(clock, SystemClock):
        return None
    reading = await store.read(read_clock)
    clock.follow(reading)
    return reading


async def acquire_sweep(tx: Tx, name: str, owner: str, now: float, ttl: float) -> bool:
    """Take or renew sweep ``name``'s lease for ``owner``; whether it holds it now.

    Another replica's live lease is read, not waited for: the upsert locks the lease row even when
    it leaves it alone, and every replica asks each tick, so each would hold the row (and the group
    commit it rode in would wait) until the others' commits ended.
    """
    held = await tx.one("sweep_lease", {"name": name})
    if held is not None and held["owner"] != owner and float(held["lease_until"]) >= now:
        return False
    rows = await tx.execute("acquire_sweep", {"name": name, "owner": owner, "now": now, "lease_until": now + ttl})
    return bool(rows)


async def cluster_status(tx: Tx, now: float, *, default_lease: float = 15.0) -> dict[str, Any]:
    """Every known worker, the sweep leases and who holds them, as plain data.

    A live worker whose heartbeat is older than its lease is ``stale``: its runs are being
    (or will be) taken over. Workers that stopped cleanly are listed as ``stopped``.
    """
    sweeps = await tx.execute("list_sweeps")
    held: dict[str, list[str]] = {}
    sweep_rows = []
    for row in sweeps:
        live = float(row["lease_until"]) > now
        if live:
            held.setdefault(row["owner"], []).append(row["name"])
        sweep_rows.append(
            {
                "name": row["name"],
                "owner": row["owner"] if live else None,
                "last_owner": row["owner"],
                "lease_left": max(0.0, float(row["lease_until"]) - now),
                "ticks": int(row["ticks"]),
            }
        )
    workers = []
    for row in await tx.execute("list_workers"):
        lease = float(row["lease"]) if row.get("lease") is not None else default_lease
        age = max(0.0, now - float(row["heartbeat_at"]))
        stopped = row["stopped_at"] is not None
        workers.append(
            {
                "id": row["id"],
                "host": row["host"],
                "pid": int(row["pid"]),
                "started_at": float(row["started_at"]),
                "heartbeat_age": age,
                "lease": lease,
                "runs_held": int(row["runs_held"]),
                "clock_offset": float(row.get("clock_offset") or 0.0),
                "labels": json.loads(row["labels"]) if row.get("labels") else {},
                "offers": json.loads(row["offers"]) if row.get("offers") else {},
                "sweeps": sorted(held.get(row["id"], [])),
                "state": "stopped" if stopped else "stale" if age > lease else "live",
            }
        )
    return {"dialect": tx.dialect, "workers": workers, "sweeps": sweep_rows}
