"""Store operations for running many workers on one store: workers, their leases, sweep claims, status.

A worker registers with its lease (how long its runs wait for it if it dies); its heartbeat
is written with every lease renewal (``renew_leases``), which extends the leases of every
run it holds. Claiming a run is a change to the run's row and lives in ``runs``; what is
here is the worker's side: its liveness, its hand-backs (``stop_worker``) and the sweep
leases (``acquire_sweep``). ``cluster_status`` is the snapshot behind ``lockgate cluster
status``: which worker holds what, and which look dead.
"""

from __future__ import annotations

from typing import Any

from .base import Row, Tx

__all__ = [
    "acquire_sweep",
    "cluster_status",
    "list_workers",
    "live_workers_on_host",
    "register_with_lease",
    "register_worker",
    "renew_leases",
    "stop_worker",
]


async def register_worker(tx: Tx, worker_id: str, host: str, pid: int, now: float) -> None:
    await tx.execute("upsert_worker", {"id": worker_id, "host": host, "pid": pid, "now": now})


async def register_with_lease(tx: Tx, worker_id: str, host: str, pid: int, now: float, lease: float) -> None:
    """Record a starting worker (or a restarted one under the same id) and its lease."""
    await register_worker(tx, worker_id, host, pid, now)
    await tx.execute("set_worker_lease", {"id": worker_id, "lease": lease})


async def stop_worker(tx: Tx, worker_id: str, now: float, *, clean: bool = True) -> list[str]:
    """Mark a worker stopped and release its runs (a dead worker's entries count as crashes)."""
    released = await tx.execute("release_owner", {"owner": worker_id, "clean": 1 if clean else 0})
    await tx.execute("stop_worker", {"id": worker_id, "now": now})
    return [r["id"] for r in released]


async def list_workers(tx: Tx) -> list[Row]:
    return await tx.execute("list_workers")


async def live_workers_on_host(tx: Tx, host: str, me: str) -> list[Row]:
    return await tx.execute("live_workers_on_host", {"host": host, "id": me})


async def renew_leases(tx: Tx, owner: str, now: float, lease_until: float) -> dict[str, int]:
    await tx.execute("heartbeat", {"id": owner, "now": now})
    rows = await tx.execute("renew_leases", {"owner": owner, "lease_until": lease_until})
    return {r["id"]: int(r["epoch"]) for r in rows}


async def acquire_sweep(tx: Tx, name: str, owner: str, now: float, ttl: float) -> bool:
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
                "sweeps": sorted(held.get(row["id"], [])),
                "state": "stopped" if stopped else "stale" if age > lease else "live",
            }
        )
    return {"dialect": tx.dialect, "workers": workers, "sweeps": sweep_rows}
