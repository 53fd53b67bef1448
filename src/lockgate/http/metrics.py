"""``GET /metrics``: Prometheus gauges sampled from the store through the Inspector on each scrape.

Each app has its own ``CollectorRegistry`` (two apps in one process never share series). A
scrape reads ``stats``, ``flow``, ``cluster_status``, ``last_successes`` and the step flow keys (a few grouped
queries), then the collector below turns that snapshot into metric families. These numbers are the cluster's,
the same from every replica: ``reports`` says whether this one serves them (the others
answer only their process-local metrics, ``engine/metrics.py``, which follow them). With a
read store (the Inspector reads a standby), every replica also says how far its standby lags.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..inspect import ClusterStatus, FlowKeyRow, FlowRow, Inspector, ReplicaLag, Stats

__all__ = ["ADMISSION_OUTCOMES", "CONTENT_TYPE_LATEST", "TOP_KEYS", "StoreMetrics"]

TOP_KEYS = 20
"""Per-key gauges keep the keys with the most waiting (or in flight): a key is a label value, so bounded."""

ADMISSION_OUTCOMES = ("admitted", "collapsed", "batched", "dropped", "skipped", "expired", "existing")
"""The ledger outcomes ``lockgate_admissions`` counts, as ``FlowRow`` holds them."""


def _always() -> bool:
    return True


@dataclass
class _Snapshot:
    stats: Stats | None = None
    flow: list[FlowRow] = field(default_factory=list)
    cluster: ClusterStatus | None = None
    successes: dict[str, float] = field(default_factory=dict)
    keys: list[FlowKeyRow] = field(default_factory=list)
    duration: float = 0.0
    errors: int = 0


class StoreMetrics(Collector):
    """The store's state as Prometheus metrics, in a registry of its own."""

    def __init__(
        self, inspector: Inspector, reports: Callable[[], bool] = _always, local: CollectorRegistry | None = None
    ) -> None:
        self.inspector = inspector
        self.reports = reports
        self.local = local  # this process's own metrics, rendered after the store's
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._snapshot = _Snapshot()
        self._lag: ReplicaLag | None = None
        self._reporting = True
        self._lock = asyncio.Lock()  # one scrape at a time: the collector reads the snapshot it set

    async def render(self) -> bytes:
        """Sample the store (when this replica reports the cluster), then both registries in the text format."""
        tail = b"" if self.local is None else generate_latest(self.local)
        async with self._lock:
            self._lag = await self.inspector.replica_lag()  # None without a read store
            self._reporting = self.reports()
            if not self._reporting:
                return generate_latest(self.registry) + tail
            started = time.perf_counter()
            errors = self._snapshot.errors
            try:
                stats, flow, cluster, successes, keys = await asyncio.gather(
                    self.inspector.stats(),
                    self.inspector.flow(),
                    self.inspector.cluster_status(),
                    self.inspector.last_successes(),
                    self.inspector.flow_keys(),
                )
            except Exception:
                self._snapshot = _Snapshot(errors=errors + 1, duration=time.perf_counter() - started)
                raise
            took = time.perf_counter() - started
            self._snapshot = _Snapshot(stats, flow, cluster, successes, keys, took, errors)
            return generate_latest(self.registry) + tail

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "lockgate_cluster_reporter",
            "1 on the replica that serves the store-wide gauges below, 0 on the others.",
            value=1 if self._reporting else 0,
        )
        if self._lag is not None:
            yield from _lag_families(self._lag)
        if self._reporting:
            yield from self._store_families(self._snapshot)

    def _store_families(self, snap: _Snapshot) -> Iterator[Metric]:
        runs = GaugeMetricFamily(
            "lockgate_runs", "Runs in the store by workflow and status.", labels=["workflow", "status"]
        )
        parked = GaugeMetricFamily(
            "lockgate_parked_starts", "Starts parked at the gate by workflow and mode.", labels=["workflow", "mode"]
        )
        if snap.stats is not None:
            for wf in snap.stats.workflows:
                for status, count in wf.runs.items():
                    if status == "total":  # a sum of the others: PromQL sums it
                        continue
                    runs.add_metric([wf.workflow, status], count)
                for mode, count in wf.parked.items():
                    parked.add_metric([wf.workflow, mode], count)
        yield runs
        yield parked
        last = GaugeMetricFamily(
            "lockgate_last_success_timestamp_seconds",
            "When the workflow's newest succeeded run finished (Unix time), read from the store at each scrape;"
            " absent until one succeeds (and once retention has swept them all).",
            labels=["workflow"],
        )
        for workflow, at in sorted(snap.successes.items()):
            last.add_metric([workflow], at)
        yield last
        yield from _flow_families(snap.flow)
        yield from _unit_families(snap.keys)
        workers = GaugeMetricFamily("lockgate_workers", "Workers registered in the store by state.", labels=["state"])
        if snap.cluster is not None:
            states: dict[str, int] = defaultdict(int)
            for w in snap.cluster.workers:
                states[w.state] += 1
            for state, count in sorted(states.items()):
                workers.add_metric([state], count)
        yield workers
        offsets = GaugeMetricFamily(
            "lockgate_worker_clock_offset_seconds",
            "Each live worker's clock minus the database's at its last heartbeat (PostgreSQL; 0 on SQLite).",
            labels=["worker"],
        )
        if snap.cluster is not None:
            for w in snap.cluster.workers:
                if w.state != "stopped":
                    offsets.add_metric([w.id], w.clock_offset)
        yield offsets
        yield from _routing_families(snap.cluster)
        yield GaugeMetricFamily(
            "lockgate_scrape_duration_seconds", "Time the last scrape spent reading the store.", value=snap.duration
        )
        yield GaugeMetricFamily(
            "lockgate_scrape_errors", "Scrapes of this process whose store read failed.", value=snap.errors
        )


def _lag_families(lag: ReplicaLag) -> Iterator[Metric]:
    """The read store's lag; a value the write store did not answer for is left out."""
    if lag.seconds is not None:
        yield GaugeMetricFamily(
            "lockgate_read_store_lag_seconds",
            "How far the read store (a standby) trails the write store: 0 when it has replayed all its WAL.",
            value=lag.seconds,
        )
    if lag.bytes_behind is not None:
        yield GaugeMetricFamily(
            "lockgate_read_store_lag_bytes",
            "WAL the write store holds past what the read store (a standby) has replayed.",
            value=lag.bytes_behind,
        )


def _routing_families(cluster: ClusterStatus | None) -> Iterator[Metric]:
    """Due runs no live worker takes (waiting for a version, or for a worker), and what live workers offer."""
    waiting = GaugeMetricFamily(
        "lockgate_runs_waiting_worker",
        "Due runs no live worker takes, by workflow, stamped version and reason (version: no live code runs it;"
        " worker: no live worker takes the workflow, by its labels or --workflows).",
        labels=["workflow", "version", "reason"],
    )
    unroutable = GaugeMetricFamily(
        "lockgate_runs_unroutable",
        "Of those, the runs waiting longer than the reporting threshold (doctor calls them a problem).",
        labels=["workflow"],
    )
    offered = GaugeMetricFamily(
        "lockgate_worker_offers",
        "Live workers that take the workflow and run runs of that version.",
        labels=["workflow", "version"],
    )
    if cluster is not None:
        late: dict[str, int] = defaultdict(int)
        for gap in cluster.waiting:
            waiting.add_metric([gap.workflow, gap.version or "", gap.reason], gap.runs)
            if gap.reported:
                late[gap.workflow] += gap.runs
        for workflow, count in sorted(late.items()):
            unroutable.add_metric([workflow], count)
        for workflow, versions in sorted(cluster.offered().items()):
            for version, count in sorted(versions.items()):
                offered.add_metric([workflow, version], count)
    yield waiting
    yield unroutable
    yield offered


def _flow_families(rows: list[FlowRow]) -> Iterator[Metric]:
    admissions = GaugeMetricFamily(
        "lockgate_admissions",
        "Gate decisions in the ledger (kept as long as its retention) by workflow and outcome.",
        labels=["workflow", "outcome"],
    )
    depth = GaugeMetricFamily("lockgate_queue_depth", "Starts waiting at the gate per workflow.", labels=["workflow"])
    oldest = GaugeMetricFamily(
        "lockgate_oldest_waiting_seconds",
        "Age of the oldest start waiting at the gate per workflow.",
        labels=["workflow"],
    )
    in_flight = GaugeMetricFamily(
        "lockgate_in_flight", "Runs holding a concurrency slot per workflow.", labels=["workflow"]
    )
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    ages: dict[str, float] = {}
    for row in rows:
        per = totals[row.workflow]
        for outcome in ADMISSION_OUTCOMES:
            per[outcome] += getattr(row, outcome)
        per["queued"] += row.queued
        per["in_flight"] += row.in_flight
        if row.oldest_waiting is not None:
            ages[row.workflow] = max(ages.get(row.workflow, 0.0), row.oldest_waiting)
    for workflow, per in sorted(totals.items()):
        for outcome in ADMISSION_OUTCOMES:
            admissions.add_metric([workflow, outcome], per[outcome])
        depth.add_metric([workflow], per["queued"])
        in_flight.add_metric([workflow], per["in_flight"])
        oldest.add_metric([workflow], ages.get(workflow, 0.0))
    yield admissions
    yield depth
    yield oldest
    yield in_flight
    yield from _key_families([r for r in rows if r.key])


def _unit_families(keys: list[FlowKeyRow]) -> Iterator[Metric]:
    """A weighted step flow key's units in its window: reserved, settled and available (``TOP_KEYS`` busiest)."""
    units = GaugeMetricFamily(
        "lockgate_flow_key_units",
        f"Units in a weighted step flow key's window by state: reserved (by calls not yet settled), settled and"
        f" available (the {TOP_KEYS} keys with most units counted).",
        labels=["key", "state"],
    )
    weighted = [k for k in keys if k.weighted]
    for k in sorted(weighted, key=lambda k: -((k.units_reserved or 0) + (k.units_settled or 0)))[:TOP_KEYS]:
        units.add_metric([k.key, "reserved"], k.units_reserved or 0)
        units.add_metric([k.key, "settled"], k.units_settled or 0)
        units.add_metric([k.key, "available"], k.units_available or 0)
    yield units


def _key_families(rows: list[FlowRow]) -> Iterator[Metric]:
    """Waiting and in-flight per flow-control key, for the ``TOP_KEYS`` busiest keys of each."""
    waiting = GaugeMetricFamily(
        "lockgate_key_waiting",
        f"Starts waiting at the gate per flow-control key (the {TOP_KEYS} keys with most).",
        labels=["workflow", "key"],
    )
    oldest = GaugeMetricFamily(
        "lockgate_key_oldest_waiting_seconds",
        f"Age of the oldest start waiting per flow-control key (the {TOP_KEYS} keys with most waiting).",
        labels=["workflow", "key"],
    )
    for row in sorted((r for r in rows if r.queued), key=lambda r: -r.queued)[:TOP_KEYS]:
        waiting.add_metric([row.workflow, row.key], row.queued)
        oldest.add_metric([row.workflow, row.key], row.oldest_waiting or 0.0)
    in_flight = GaugeMetricFamily(
        "lockgate_key_in_flight",
        f"Runs holding a concurrency slot per key (the {TOP_KEYS} keys with most).",
        labels=["workflow", "key"],
    )
    for row in sorted((r for r in rows if r.in_flight), key=lambda r: -r.in_flight)[:TOP_KEYS]:
        in_flight.add_metric([row.workflow, row.key], row.in_flight)
    yield waiting
    yield oldest
    yield in_flight
