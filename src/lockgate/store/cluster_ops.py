"""Store operations for running many workers on one store: registration, hand-backs, status.

A worker registers with its lease (how long its runs wait for it if it dies); its heartbeat
is written with every lease renewal. ``status`` is the snapshot behind ``lockgate cluster
status``: which worker holds what, and which look dead.
"""

from __future__ import annotations

from typing import Any

from . import ops
from .base import Tx

__all__ = ["register", "status"]


async def register(tx: Tx, worker_id: str, host: str, pid: int, now: float, lease: float) -> None:
    """Record a starting worker (or a restarted one under the same id) and its lease."""
    await ops.register_worker(tx, worker_id, host, pid, now)
    await tx.execute("set_worker_lease", {"id": worker_id, "lease": lease})


async def status(tx: Tx, now: float, *, default_lease: float = 15.0) -> dict[str, Any]:
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
