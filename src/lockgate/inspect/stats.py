"""Counts per workflow: runs per status and starts parked at the gate per mode."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..store import runs as store_runs
from ..store.base import Tx
from .runs import RUN_STATUSES

__all__ = ["Stats", "StatsTotals", "WorkflowStats", "stats"]


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
class Stats:
    """Counts per workflow (sorted by name) and their totals; ``workflow`` is the filter asked for."""

    workflow: str | None
    workflows: list[WorkflowStats]
    totals: StatsTotals

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def stats(tx: Tx, workflow: str | None = None) -> Stats:
    """Runs per workflow and status and parked starts per workflow and mode, read together so they agree."""
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
    return Stats(workflow=workflow, workflows=listed, totals=totals)
