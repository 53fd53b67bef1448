"""``lockgate doctor``: a one-shot health report of a store, each finding judged ``ok``, ``warn`` or ``problem``.

A ``problem`` needs a person (the command exits non-zero): a worker that died holding runs,
no live worker while runs wait, runs stalled or crash-looped, parked starts past their start
timeout (the drainer would have expired them), slots held by ended runs, schedules behind.
A ``warn`` is worth a look (a store migrated past this code, a retention backlog); what
cannot be judged without the app is ``skipped``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..clock import CLOCK_TOLERANCE
from ..routing import RoutingGap
from ..schedule import ScheduleDef
from ..store import doctor as ops
from ..store import workers
from ..store.base import Tx
from .cluster import cluster_status

__all__ = ["DoctorReport", "DoctorSettings", "Finding", "diagnose"]

Verdict = Literal["ok", "warn", "problem", "skipped"]
LISTED = 20  # runs, slots... named per finding; the count is always whole


@dataclass(frozen=True)
class Finding:
    """One check: its verdict, a one-line summary, and the rows behind it."""

    check: str
    status: Verdict
    summary: str
    details: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "status": self.status, "summary": self.summary, "details": self.details}


@dataclass(frozen=True)
class DoctorReport:
    """Every finding, in a fixed order; ``needs_person`` when any is a ``problem``."""

    at: float
    findings: list[Finding]

    @property
    def needs_person(self) -> bool:
        return any(f.status == "problem" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "needs_person": self.needs_person,
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass(frozen=True)
class DoctorSettings:
    """What the report judges against: the engine's ``stall_after`` and ``retention`` (seconds)."""

    stall_after: float = 30 * 60
    retention: float | None = 30 * 86400
    schedule_grace: float = 5 * 60
    """How long past its next slot a schedule may be before it counts as behind."""
    worker_grace: float = 60.0
    """How long a run may be due with no live worker before that counts as a problem."""


async def diagnose(
    tx: Tx, now: float, settings: DoctorSettings, schedules: Mapping[str, ScheduleDef] | None = None
) -> DoctorReport:
    """Read every check at ``now`` in one transaction; ``schedules`` (from the app) judge the schedules."""
    cluster = await workers.cluster_status(tx, now)
    routed = await cluster_status(tx, now, settings.worker_grace)
    stalled = await ops.stalled(tx, now - settings.stall_after, now, LISTED + 1)
    findings = [
        await _migrations(tx),
        _workers(cluster["workers"], await ops.runnable(tx, now - settings.worker_grace) > 0),
        _clocks(cluster["workers"]),
        _routing(routed.waiting, routed.offered()),
        _stalled(stalled, now, settings.stall_after),
        _crashlooped(await ops.crashlooped(tx, LISTED + 1)),
        _overdue(await ops.overdue_parked(tx, now), now),
        _orphaned(await ops.orphaned_slots(tx, LISTED + 1)),
        _schedules(
            await ops.schedule_states(tx),
            await ops.schedules_behind(tx, now - settings.schedule_grace, LISTED + 1),
            schedules,
            now,
            settings.schedule_grace,
        ),
        await _retention(tx, now, settings.retention),
        _size(await ops.store_size(tx), tx.dialect),
    ]
    return DoctorReport(at=now, findings=findings)


async def _migrations(tx: Tx) -> Finding:
    applied, shipped = await ops.migration_state(tx)
    ahead = sorted(set(applied) - set(shipped))
    missing = sorted(set(shipped) - set(applied))
    details = [{"applied": applied[-1] if applied else None, "shipped": shipped[-1] if shipped else None}]
    if missing:
        return Finding("migrations", "problem", f"migrations not applied: {missing}", details)
    if ahead:
        return Finding(
            "migrations", "warn", f"the store has migrations this code does not know: {ahead} (a newer deploy)", details
        )
    return Finding("migrations", "ok", f"current (version {details[0]['applied']})", details)


def _workers(found: list[dict[str, Any]], work_waiting: bool) -> Finding:
    live = [w for w in found if w["state"] == "live"]
    stale = [w for w in found if w["state"] == "stale"]
    details = [
        {k: w[k] for k in ("id", "host", "pid", "state", "heartbeat_age", "lease", "runs_held")}
        for w in found
        if w["state"] != "stopped"
    ]
    holding = [w for w in stale if w["runs_held"]]
    if holding:
        held = sum(w["runs_held"] for w in holding)
        return Finding("workers", "problem", f"{len(holding)} dead worker(s) hold {held} run(s)", details)
    if not live and work_waiting:
        return Finding("workers", "problem", "no live worker, and runs are waiting to be executed", details)
    if stale:
        return Finding("workers", "warn", f"{len(live)} live, {len(stale)} stale (holding nothing)", details)
    oldest = max((w["heartbeat_age"] for w in live), default=0.0)
    summary = f"{len(live)} live, oldest heartbeat {oldest:.1f}s ago" if live else "no workers (nothing waits)"
    return Finding("workers", "ok", summary, details)


def _routing(waiting: list[RoutingGap], offered: dict[str, dict[str, int]]) -> Finding:
    """Due runs no live worker takes: waiting for a version, or for a worker whose labels and selection match."""
    details: list[dict[str, Any]] = [g.to_dict() for g in waiting]
    offers = "; ".join(f"{wf} {sorted(v)}" for wf, v in sorted(offered.items()))
    late = [g for g in waiting if g.reported]
    if late:
        named = ", ".join(
            f"{g.workflow} version {g.version!r} ({g.runs})" if g.reason == "version" else f"{g.workflow} ({g.runs})"
            for g in late[:LISTED]
        )
        summary = f"{sum(g.runs for g in late)} run(s) no live worker takes: {named}"
        return Finding("routing", "problem", f"{summary}; live workers offer: {offers or 'nothing'}", details)
    versions = [g for g in waiting if g.reason == "version"]
    if versions:  # a deploy under way, or old code gone: worth a look before it counts as a problem
        summary = f"{sum(g.runs for g in versions)} due run(s) wait for a version no live worker runs (not for long)"
        return Finding("routing", "warn", f"{summary}; live workers offer: {offers or 'nothing'}", details)
    if waiting:
        summary = f"{sum(g.runs for g in waiting)} due run(s) wait for a worker that takes them (not for long)"
        return Finding("routing", "ok", summary, details)
    return Finding("routing", "ok", f"every due run has a live worker; live workers offer: {offers or 'nothing'}")


def _clocks(found: list[dict[str, Any]]) -> Finding:
    """Live workers whose own clock is off the database's by more than the tolerance (they keep its time)."""
    live = [w for w in found if w["state"] != "stopped"]
    skewed = [{"id": w["id"], "host": w["host"], "clock_offset": w["clock_offset"]} for w in live]
    skewed = [w for w in skewed if abs(w["clock_offset"]) > CLOCK_TOLERANCE]
    if skewed:
        worst = max(skewed, key=lambda w: abs(w["clock_offset"]))
        summary = f"{len(skewed)} worker clock(s) off the database's by more than {CLOCK_TOLERANCE:g}s"
        return Finding("clocks", "warn", f"{summary} (worst {worst['clock_offset']:+.3f}s on {worst['host']})", skewed)
    widest = max((abs(w["clock_offset"]) for w in live), default=0.0)
    return Finding("clocks", "ok", f"every worker within {CLOCK_TOLERANCE:g}s of the database (widest {widest:.3f}s)")


def _stalled(rows: list[dict[str, Any]], now: float, stall_after: float) -> Finding:
    details = [
        {"run_id": r["id"], "workflow": r["workflow"], "waiting_on": r["waiting_on"], "idle": now - r["progress_at"]}
        for r in rows[:LISTED]
    ]
    if not rows:
        return Finding("stalled_runs", "ok", f"none without progress for {stall_after:g}s")
    more = "+" if len(rows) > LISTED else ""
    return Finding("stalled_runs", "problem", f"{len(details)}{more} run(s) without progress past stall_after", details)


def _crashlooped(rows: list[dict[str, Any]]) -> Finding:
    details = [{"run_id": r["id"], "workflow": r["workflow"], "suspended_at": r["updated_at"]} for r in rows[:LISTED]]
    if not rows:
        return Finding("crash_looped_runs", "ok", "none")
    more = "+" if len(rows) > LISTED else ""
    return Finding("crash_looped_runs", "problem", f"{len(details)}{more} run(s) suspended after crash loops", details)


def _overdue(rows: list[dict[str, Any]], now: float) -> Finding:
    details = [
        {
            "workflow": r["workflow"],
            "parked": int(r["parked"]),
            "oldest_waiting": now - float(r["oldest"]),
            "overdue": now - float(r["expired_at"]),
        }
        for r in rows
    ]
    if not rows:
        return Finding("parked_past_start_timeout", "ok", "none")
    total = sum(d["parked"] for d in details)
    return Finding(
        "parked_past_start_timeout",
        "problem",
        f"{total} parked start(s) past their start timeout (is a drainer running?)",
        details,
    )


def _orphaned(rows: list[dict[str, Any]]) -> Finding:
    details = [
        {"run_id": r["run_id"], "workflow": r["workflow"], "scope": r["scope"], "key": r["key"], "run": r["status"]}
        for r in rows[:LISTED]
    ]
    if not rows:
        return Finding("orphaned_slots", "ok", "none")
    more = "+" if len(rows) > LISTED else ""
    return Finding("orphaned_slots", "problem", f"{len(details)}{more} slot(s) held by ended or missing runs", details)


def _schedules(
    rows: list[dict[str, Any]],
    late: list[dict[str, Any]],
    declared: Mapping[str, ScheduleDef] | None,
    now: float,
    grace: float,
) -> Finding:
    # Runtime schedules carry their next instant (next_at): judged without the app.
    behind = [{"schedule": r["name"], "workflow": r["workflow"], "behind": now - float(r["next_at"])} for r in late]
    if behind:
        more = "+" if len(late) > LISTED else ""
        return Finding(
            "schedules", "problem", f"{len(behind[:LISTED])}{more} schedule(s) behind their next slot", behind[:LISTED]
        )
    if not rows:
        return Finding("schedules", "ok", "no declared schedules behind")
    if declared is None:
        return Finding("schedules", "skipped", f"{len(rows)} declared schedule(s): pass the app to judge them")
    for row in rows:
        schedule = declared.get(row["name"])
        if schedule is None or row["paused"] or row["orphaned_at"] is not None or row["watermark"] is None:
            continue
        due = schedule.next_after(float(row["watermark"]))
        if due < now - grace:
            behind.append({"schedule": row["name"], "workflow": row["workflow"], "behind": now - due})
    if behind:
        return Finding("schedules", "problem", f"{len(behind)} schedule(s) behind their next slot", behind)
    return Finding("schedules", "ok", f"{len(rows)} schedule(s) on time")


async def _retention(tx: Tx, now: float, retention: float | None) -> Finding:
    if retention is None:
        return Finding("retention", "ok", "retention off: ended runs are kept")
    slack = max(3600.0, retention * 0.1)  # the sweep forgets in batches: a little lag is normal
    row = await ops.retention_backlog(tx, now - retention - slack)
    count = int(row["runs"] or 0)
    if not count:
        return Finding("retention", "ok", "no backlog")
    details = [{"runs": count, "oldest_ended_ago": now - float(row["oldest"])}]
    return Finding("retention", "warn", f"{count} ended run(s) past retention not yet forgotten", details)


def _size(size: int | None, dialect: str) -> Finding:
    if size is None:
        return Finding("store_size", "skipped", "unknown")
    return Finding("store_size", "ok", f"{size / 1e6:.1f} MB ({dialect})", [{"bytes": size, "dialect": dialect}])
