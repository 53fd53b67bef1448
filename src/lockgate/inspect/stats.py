"""Counts per workflow: runs per status, starts parked at the gate per mode, and runs per hour."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from ..clock import to_datetime
from ..errors import InvalidArgument
from ..store import runs as store_runs
from ..store.base import Tx
from ..store.listing import runs_per_hour
from .listing import RUN_STATUSES

__all__ = [
    "MAX_HOURS",
    "HourlyRuns",
    "Hours",
    "Stats",
    "StatsTotals",
    "WorkflowStats",
    "hourly",
    "last_successes",
    "stats",
]

MAX_HOURS = 24 * 31
"""The longest span ``hourly`` counts (a month of hourly buckets)."""


@dataclass(frozen=True)
class WorkflowStats:
    """One workflow's runs per status (and ``total``) and its parked starts per mode."""

    workflow: str
    runs: dict[str, int]
    parked: dict[str, int] = field(default_factory=dict)
    parked_total: int = 0


@dataclass(frozen=True)
class StatsTotals:
    """The sums over every listed workflow."""

    runs: dict[str, int]
    parked: dict[str, int]
    parked_total: int


@dataclass(frozen=True)
class HourlyRuns:
    """Runs created in each hour of the span (oldest hour first), how many of them failed, and
    their statuses now over the whole span."""

    workflow: str
    started: list[int]
    failed: list[int]
    statuses: dict[str, int]
    total: int


@dataclass(frozen=True)
class Hours:
    """Runs per hour over the last ``hours`` hours: bucket ``i`` starts at ``start + i`` hours (UTC,
    on the hour; the last one is the hour under way), per workflow (sorted by name) and in total."""

    hours: int
    start: datetime
    workflows: list[HourlyRuns]
    totals: HourlyRuns


@dataclass(frozen=True)
class Stats:
    """Counts per workflow (sorted by name) and their totals; ``workflow`` is the filter asked for.

    ``hourly`` holds the runs per hour when a span was asked for (``stats(hours=N)``)."""

    workflow: str | None
    workflows: list[WorkflowStats]
    totals: StatsTotals
    hourly: Hours | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def stats(tx: Tx, workflow: str | None = None, *, hours: int | None = None, now: float = 0.0) -> Stats:
    """Runs per workflow and status and parked starts per workflow and mode, read together so they agree;
    with ``hours``, also the runs per hour over that many hours up to ``now`` (``hourly``)."""
    per_hour = None if hours is None else await hourly(tx, now, hours, workflow)
    run_rows, parked_rows = await store_runs.count_runs(tx, workflow)
    names = sorted({r["workflow"] for r in run_rows} | {r["workflow"] for r in parked_rows})
    runs: dict[str, dict[str, int]] = {name: dict.fromkeys(RUN_STATUSES, 0) for name in names}
    parked: dict[str, dict[str, int]] = {name: {} for name in names}
    for r in run_rows:
        runs[r["workflow"]][r["status"]] = int(r["n"])
    for r in parked_rows:
        parked[r["workflow"]][r["mode"]] = int(r["n"])
    listed = []
    for name in names:
        counts = {**runs[name], "total": sum(runs[name][s] for s in RUN_STATUSES)}
        listed.append(WorkflowStats(name, counts, parked[name], sum(parked[name].values())))
    modes: dict[str, int] = {}
    for entry in listed:
        for mode, n in entry.parked.items():
            modes[mode] = modes.get(mode, 0) + n
    totals = StatsTotals(
        runs={key: sum(e.runs[key] for e in listed) for key in (*RUN_STATUSES, "total")},
        parked=dict(sorted(modes.items())),
        parked_total=sum(e.parked_total for e in listed),
    )
    return Stats(workflow=workflow, workflows=listed, totals=totals, hourly=per_hour)


async def hourly(tx: Tx, now: float, hours: int, workflow: str | None = None) -> Hours:
    """Runs created per hour over the ``hours`` hours up to ``now`` (the last one under way), per workflow.

    Reads a range of the creation-time index: the cost follows the runs of the span, not the table.
    """
    if not isinstance(hours, int) or not 1 <= hours <= MAX_HOURS:
        raise InvalidArgument(f"hours must be between 1 and {MAX_HOURS}")
    first = int(now // 3600) - hours + 1
    rows = await runs_per_hour(tx, first * 3600.0, workflow)
    names = sorted({r["workflow"] for r in rows})
    started = {name: [0] * hours for name in names}
    failed = {name: [0] * hours for name in names}
    statuses = {name: dict.fromkeys(RUN_STATUSES, 0) for name in names}
    for r in rows:
        at, n, name = int(r["hour"]) - first, int(r["n"]), r["workflow"]
        if not 0 <= at < hours:  # created after ``now`` (a clock behind the writer's)
            continue
        started[name][at] += n
        statuses[name][r["status"]] += n
        if r["status"] == "failed":
            failed[name][at] += n
    listed = [HourlyRuns(name, started[name], failed[name], statuses[name], sum(started[name])) for name in names]
    totals = HourlyRuns(
        "(all)",
        [sum(e.started[i] for e in listed) for i in range(hours)],
        [sum(e.failed[i] for e in listed) for i in range(hours)],
        {s: sum(e.statuses[s] for e in listed) for s in RUN_STATUSES},
        sum(e.total for e in listed),
    )
    start = to_datetime(first * 3600.0)
    assert start is not None
    return Hours(hours=hours, start=start, workflows=listed, totals=totals)


async def last_successes(tx: Tx) -> dict[str, float]:
    """When each workflow's newest succeeded run finished (seconds since the epoch), read from the store,
    so every process answers alike; a workflow whose succeeded runs were all swept by retention has none."""
    return await store_runs.last_successes(tx)
