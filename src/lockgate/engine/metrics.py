"""``EngineMetrics``: what this process did, as Prometheus counters and histograms.

An observer (``observer.py``) kept in a ``CollectorRegistry`` of its own, so two engines in
one process never share series and nothing lands in ``prometheus_client``'s global registry.
It counts only what this process saw: on PostgreSQL each replica reports its own work, and
a sum over replicas is the cluster's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from ..observer import Observer, RunOutcome

__all__ = ["BATCH_BUCKETS", "STEP_BUCKETS", "EngineMetrics"]

STEP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Seconds: a step attempt from a millisecond call to a five-minute one."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
"""Write operations per group commit."""


class EngineMetrics(Observer):
    """Counters and histograms of this process's runs, steps, leases and store commits."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs_started = Counter(
            "lockgate_runs_started", "Runs the gate started in this process, by workflow.", ["workflow"], registry=r
        )
        self.runs_ended = Counter(
            "lockgate_runs_ended",
            "Runs that ended executing in this process, by workflow and status (succeeded, failed, suspended).",
            ["workflow", "status"],
            registry=r,
        )
        self.run_attempts = Counter(
            "lockgate_run_attempts",
            "Entries into a run's body in this process, by workflow and how the entry ended "
            "(succeeded, failed, suspended, parked, stopped).",
            ["workflow", "outcome"],
            registry=r,
        )
        self.step_seconds = Histogram(
            "lockgate_step_duration_seconds",
            "Time one attempt of a step's function took, by workflow and step.",
            ["workflow", "step"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.step_attempts = Counter(
            "lockgate_step_attempts",
            "Attempts of steps' functions, by workflow, step and outcome (ok, error, stopped).",
            ["workflow", "step", "outcome"],
            registry=r,
        )
        self.step_retries = Counter(
            "lockgate_step_retries",
            "Step attempts after the first (a retry of a failed attempt), by workflow and step.",
            ["workflow", "step"],
            registry=r,
        )
        self.takeovers = Counter(
            "lockgate_lease_takeovers",
            "Runs this process claimed whose previous entry had not finished (a dead or lost lease), by workflow.",
            ["workflow"],
            registry=r,
        )
        self.batch_size = Histogram(
            "lockgate_commit_batch_size",
            "Write operations per group commit of this process's store.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.store_errors = Counter(
            "lockgate_store_errors",
            "Store reads and commits that failed, by kind (read, commit).",
            ["kind"],
            registry=r,
        )
        self.stalled_commits = Counter(
            "lockgate_store_stalled_commits",
            "Commits that waited more than 10 s (a blocked server, or a synchronous standby missing).",
            registry=r,
        )

    def run_started(self, workflow: str) -> None:
        self.runs_started.labels(workflow).inc()

    @contextlib.contextmanager
    def run_attempt(self, row: Mapping[str, Any], outcome: RunOutcome) -> Iterator[None]:
        try:
            yield
        finally:
            self.run_attempts.labels(row["workflow"], outcome.value).inc()

    @contextlib.contextmanager
    def step_attempt(self, workflow: str, run_id: str, step: str, attempt: int) -> Iterator[None]:
        started = time.perf_counter()
        outcome = "ok"
        try:
            yield
        except Exception:
            outcome = "error"
            raise
        except BaseException:  # cancelled, parked, lease lost: the attempt was stopped, it did not fail
            outcome = "stopped"
            raise
        finally:
            self.step_seconds.labels(workflow, step).observe(time.perf_counter() - started)
            self.step_attempts.labels(workflow, step, outcome).inc()
            if attempt > 1:
                self.step_retries.labels(workflow, step).inc()

    def run_ended(self, workflow: str, status: str) -> None:
        self.runs_ended.labels(workflow, status).inc()

    def lease_takeover(self, workflow: str) -> None:
        self.takeovers.labels(workflow).inc()

    def committed(self, size: int) -> None:
        self.batch_size.observe(size)

    def store_error(self, where: str) -> None:
        self.store_errors.labels(where).inc()

    def commit_stalled(self) -> None:
        self.stalled_commits.inc()
