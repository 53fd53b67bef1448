"""The workers sharing a store, what each holds, which look dead, and who holds each sweep lease."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..store import workers as store_workers
from ..store.base import Tx

__all__ = ["ClusterStatus", "SweepLease", "WorkerStatus", "cluster_status"]


@dataclass(frozen=True)
class WorkerStatus:
    """One worker process: ``state`` is live, stale (heartbeat older than its lease) or stopped."""

    id: str
    host: str
    pid: int
    started_at: float  # epoch seconds
    heartbeat_age: float  # seconds
    lease: float  # seconds
    runs_held: int
    sweeps: list[str]
    state: str
    clock_offset: float = 0.0  # seconds: the worker's clock minus the database's (ahead: +), at its last heartbeat


@dataclass(frozen=True)
class SweepLease:
    """One sweep's lease: its holder now (``None`` once lapsed) and the last one."""

    name: str
    owner: str | None
    last_owner: str | None
    lease_left: float  # seconds
    ticks: int


@dataclass(frozen=True)
class ClusterStatus:
    """The store's dialect, every known worker and the sweep leases."""

    dialect: str
    workers: list[WorkerStatus] = field(default_factory=list)
    sweeps: list[SweepLease] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def cluster_status(tx: Tx, now: float) -> ClusterStatus:
    """The snapshot behind ``lockgate cluster status`` at ``now``."""
    found = await store_workers.cluster_status(tx, now)
    return ClusterStatus(
        dialect=found["dialect"],
        workers=[WorkerStatus(**w) for w in found["workers"]],
        sweeps=[SweepLease(**s) for s in found["sweeps"]],
    )
