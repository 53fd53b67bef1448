"""The workers sharing a store, what each holds, which look dead, and who holds each sweep lease."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..routing import RoutingGap, judge
from ..store import versions as store_versions
from ..store import workers as store_workers
from ..store.base import Tx

__all__ = ["UNROUTABLE_AFTER", "ClusterStatus", "SweepLease", "WorkerStatus", "cluster_status", "routing_gaps"]

UNROUTABLE_AFTER = 60.0  # seconds a due run may wait for a worker that takes it before it is reported


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
    labels: dict[str, str] = field(default_factory=dict)  # the labels it registered (routing.py)
    offers: dict[str, Any] = field(default_factory=dict)  # per workflow it takes: {"versions", "patches"}


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
    waiting: list[RoutingGap] = field(default_factory=list)
    """Due runs no live worker takes (a version no live code runs, or no worker for the workflow)."""

    def offered(self) -> dict[str, dict[str, int]]:
        """Per workflow, each version the live workers offer and how many live workers offer it."""
        out: dict[str, dict[str, int]] = {}
        for w in self.workers:
            if w.state == "live":
                for wf, offer in w.offers.items():
                    for v in offer.get("versions", ()):
                        out.setdefault(wf, {})[v] = out.setdefault(wf, {}).get(v, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def cluster_status(tx: Tx, now: float, after: float = UNROUTABLE_AFTER) -> ClusterStatus:
    """The snapshot behind ``lockgate cluster status`` at ``now`` (``after``: when a wait is reported)."""
    found = await store_workers.cluster_status(tx, now)
    status = ClusterStatus(
        dialect=found["dialect"],
        workers=[WorkerStatus(**w) for w in found["workers"]],
        sweeps=[SweepLease(**s) for s in found["sweeps"]],
    )
    live = [w.offers for w in status.workers if w.state == "live"]
    status.waiting.extend(judge(await store_versions.due_groups(tx, now), live, now, after))
    return status


async def routing_gaps(tx: Tx, now: float, after: float = UNROUTABLE_AFTER) -> list[RoutingGap]:
    """The due runs no live worker takes, by workflow, version and patches."""
    return (await cluster_status(tx, now, after)).waiting
