"""The soak's invariants, checked from the database and the side-effect tables once the load has settled.

Each check returns the figures it measured and the violations it found (empty: the
invariant held). The pure helpers (``max_overlap``, ``window_excess``) are tested alone.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..cluster.harness import Cluster
from .app import BEGUN, FLOW_LIMITS, LIMITS, SCHEDULE_EVERY

__all__ = ["Arrival", "Report", "check", "max_overlap", "window_excess"]

TERMINAL_RUN = {"succeeded", "failed", "cancelled"}
SETTLED_AT_ARRIVAL = {"admitted", "existing", "dropped", "skipped"}
PARKED_AT_ARRIVAL = {"queued", "collapsed", "batched"}
# How long after a step's side effect a kill may come and still explain running that step again:
# the step's journal entry had not been committed yet (it is, within ~50 ms of the step's end).
KILL_EXPLAINS = 5.0
SIGNAL_TAKEN_WITHIN = 30.0  # seconds from a signal's send to its run taking it, kills and takeovers included


@dataclass
class Arrival:
    """One start the driver made, as the gate answered it."""

    workflow: str
    ticket: str
    status: str
    run_id: str | None
    n: int = 0


@dataclass
class Report:
    figures: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def fail(self, what: str, items: Iterable[Any]) -> None:
        found = list(items)
        if found:
            self.violations.append(f"{what}: {len(found)} (e.g. {found[:5]})")

    def render(self) -> str:
        width = max(len(k) for k in self.figures) if self.figures else 0
        lines = [f"  {k.ljust(width)}  {v}" for k, v in self.figures.items()]
        lines.append(f"  {'violations'.ljust(width)}  {len(self.violations)}")
        lines += [f"    - {v}" for v in self.violations]
        return "\n".join(lines)


def max_overlap(spans: Iterable[tuple[float, float]]) -> int:
    """The most half-open ``[start, end)`` spans open at one instant (an end at t frees room for a start at t)."""
    points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda p: (p[0], p[1]))
    most = now = 0
    for _, delta in points:
        now += delta
        most = max(most, now)
    return most


def window_excess(times: Sequence[float], limit: int, period: float, slack: float = 1e-6) -> list[float]:
    """The instants at which more than ``limit`` of ``times`` fall inside one ``period``-long window."""
    ordered = sorted(times)
    return [ordered[i + limit] for i in range(len(ordered) - limit) if ordered[i + limit] - ordered[i] < period - slack]


async def check(
    cluster: Cluster,
    arrivals: list[Arrival],
    events: list[str],
    kills: list[tuple[int, float]],
    window: tuple[float, float],
    resumed: int,
) -> Report:
    """Every invariant of the soak; ``window``: when the load began and stopped (``time.time()``)."""
    report = Report()
    began, stopped = window
    await _arrivals(cluster, arrivals, report)
    await _runs(cluster, stopped, report)
    await _steps(cluster, kills, report)
    await _limits(cluster, kills, report)
    await _schedule(cluster, began, stopped, report)
    await _events(cluster, events, report)
    await _batches(cluster, arrivals, report)
    report.figures["kills (kill -9)"] = len(kills)
    report.figures["crash-looped runs resumed"] = resumed
    return report


async def _arrivals(cluster: Cluster, arrivals: list[Arrival], report: Report) -> None:
    rows = await cluster.fetch("SELECT ticket, outcome, pending_id, run_id FROM lockgate_ledger WHERE kind = 'arrival'")
    by_ticket: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        by_ticket[row[0]].append(row)
    drains: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for pending_id, outcome, run_id in await cluster.fetch(
        "SELECT pending_id, outcome, run_id FROM lockgate_ledger WHERE kind = 'drain' AND pending_id IS NOT NULL"
    ):
        drains[pending_id].append((outcome, run_id))
    statuses = dict(await cluster.fetch("SELECT id, status FROM lockgate_runs"))
    ours = [a.ticket for a in arrivals]
    report.fail("arrivals without a ledger row", [t for t in ours if t not in by_ticket])
    report.fail("arrivals with more than one ledger row", [t for t in ours if len(by_ticket.get(t, ())) > 1])
    unsettled = []
    for arrival in arrivals:
        found = by_ticket.get(arrival.ticket)
        if not found:
            continue
        _, outcome, pending_id, run_id = found[0]
        if outcome in SETTLED_AT_ARRIVAL:
            if run_id is not None and statuses.get(run_id) not in TERMINAL_RUN:
                unsettled.append((arrival.ticket, outcome, statuses.get(run_id)))
        elif outcome in PARKED_AT_ARRIVAL:
            fates = drains.get(pending_id or "", [])
            ended = [f for f in fates if f[0] != "queued"]
            if not ended or any(r is not None and statuses.get(r) not in TERMINAL_RUN for _, r in ended):
                unsettled.append((arrival.ticket, outcome, fates))
        else:
            unsettled.append((arrival.ticket, outcome, "unknown outcome"))
    report.fail("arrivals without a terminal fate", unsettled)
    left = await cluster.fetch("SELECT COUNT(*) FROM lockgate_pending")
    report.fail("starts still parked at the end", range(left[0][0]))
    outcomes = Counter(by_ticket[t][0][1] for t in ours if t in by_ticket)
    report.figures["arrivals (driver starts)"] = len(arrivals)
    report.figures["arrival outcomes"] = dict(sorted(outcomes.items()))


async def _runs(cluster: Cluster, stopped: float, report: Report) -> None:
    rows = await cluster.fetch(
        "SELECT workflow, status, COUNT(*) FROM lockgate_runs WHERE workflow <> 'soak.tick' OR created_at <= %s "
        "GROUP BY workflow, status",
        stopped,
    )
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for workflow, status, count in rows:
        per[workflow][status] += count
    report.figures["runs"] = sum(sum(c.values()) for c in per.values())
    report.figures["runs per workflow"] = {w: dict(c) for w, c in sorted(per.items())}
    report.fail("runs not terminal", [(w, s, n) for w, c in per.items() for s, n in c.items() if s not in TERMINAL_RUN])
    bad = await cluster.fetch(
        "SELECT id, workflow, status, error_tag, error_message FROM lockgate_runs "
        "WHERE status IN ('failed', 'cancelled')"
    )
    report.fail("runs that failed or were cancelled", bad)
    # The driver signals every soak.multi run a moment after its start: the run takes the signal within a
    # lease or two of a kill, or once resumed if it crash-looped. A signal found only when the wait's
    # timeout (120 s) woke its run was sent as the run parked, and the send woke nothing.
    late = await cluster.fetch(
        "SELECT m.run_id, m.created_at, m.finished_at FROM lockgate_messages m"
        " WHERE m.kind = 'signal' AND m.finished_at - m.created_at > %s AND NOT EXISTS ("
        "   SELECT 1 FROM lockgate_run_events e WHERE e.run_id = m.run_id AND e.type = 'run-crashlooped')",
        SIGNAL_TAKEN_WITHIN,
    )
    report.fail(f"signals taken more than {SIGNAL_TAKEN_WITHIN:g}s after they were sent", late)


async def _steps(cluster: Cluster, kills: list[tuple[int, float]], report: Report) -> None:
    rows = await cluster.fetch("SELECT run_id, step, pid, at FROM cluster_effects ORDER BY run_id, step, at")
    runs: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)  # (run, step): (pid, at) in order
    for run_id, step, pid, at in rows:
        runs[(run_id, step)].append((pid, at))
    killed_at = dict(kills)
    reruns, duplicates, gaps = 0, [], [0.0]
    for (run_id, step), done in runs.items():
        if step.endswith(BEGUN):
            continue
        for (pid, at), (_, next_at) in itertools.pairwise(done):
            kill = killed_at.get(pid)
            if kill is not None and at <= kill <= min(next_at, at + KILL_EXPLAINS):
                reruns += 1  # the process died before the step's entry was committed: at least once
                gaps.append(kill - at)
            else:
                duplicates.append((run_id, step, pid))
    report.figures["step side effects"] = sum(len(d) for (_, s), d in runs.items() if not s.endswith(BEGUN))
    report.figures["steps re-run after a kill (uncommitted)"] = reruns
    report.figures["longest effect-to-kill gap of a re-run step (s)"] = round(max(gaps), 3)
    report.figures["duplicates (completed step run twice)"] = len(duplicates)
    # A step begun by a worker that was then killed, and ended by another: a takeover.
    begun: dict[tuple[str, str], list[int]] = defaultdict(list)
    for (run_id, step), done in runs.items():
        if step.endswith(BEGUN):
            begun[(run_id, step.removesuffix(BEGUN))] = [p for p, _ in done]
    cut = [
        (run_id, step)
        for (run_id, step), pids in begun.items()
        if pids[0] in killed_at and runs.get((run_id, step), [(pids[0], 0)])[-1][0] != pids[0]
    ]
    report.figures["steps begun again after a kill -9"] = sum(len(p) - 1 for p in begun.values())
    report.figures["takeovers (steps of a killed worker finished by another)"] = len(cut)
    report.fail("completed steps executed twice", duplicates)


async def _limits(cluster: Cluster, kills: list[tuple[int, float]], report: Report) -> None:
    limit = LIMITS["concurrency"]
    held = dict(await cluster.fetch("SELECT key, MAX(held) FROM soak_slots GROUP BY key ORDER BY key"))
    report.figures[f"max slots held per key (limit {limit})"] = held
    report.fail("concurrency limit exceeded (slots)", [(k, n) for k, n in held.items() if n > limit])
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for created, finished, payload in await cluster.fetch(
        "SELECT created_at, finished_at, payload FROM lockgate_runs WHERE workflow = 'soak.limited'"
    ):
        by_key[json.loads(payload)["key"]].append((created, finished if finished is not None else float("inf")))
    # A figure only: a run's created_at is read before its admission waits for the key lock, so under
    # load an admission can look older than the end that made room for it.
    report.figures[f"max runs in flight per key, by timestamps (limit {limit})"] = {
        k: max_overlap(v) for k, v in sorted(by_key.items())
    }
    killed_at = dict(kills)
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, pid, started, ended in await cluster.fetch("SELECT key, pid, started_at, ended_at FROM soak_spans"):
        end = ended if ended is not None else killed_at.get(pid, float("inf"))
        spans[key].append((started, end))
    flowed = {k.removeprefix("flow:"): spans.pop(k) for k in [k for k in spans if k.startswith("flow:")]}
    await _flow(cluster, flowed, report)
    step_peaks = {k: max_overlap(v) for k, v in sorted(spans.items())}
    report.figures[f"max steps executing per key (limit {limit})"] = step_peaks
    report.fail("concurrency limit exceeded (executing steps)", [(k, p) for k, p in step_peaks.items() if p > limit])
    for workflow, name in (("soak.throttled", "throttle"), ("soak.rated", "rate")):
        count, period = LIMITS[name]
        times: dict[str, list[float]] = defaultdict(list)
        for created, payload in await cluster.fetch(
            "SELECT created_at, payload FROM lockgate_runs WHERE workflow = %s", workflow
        ):
            times[json.loads(payload)["key"]].append(created)
        busiest = {k: _busiest(v, period) for k, v in sorted(times.items())}
        report.figures[f"{name}: most admissions in one {period:g}s window (limit {count})"] = busiest
        report.fail(
            f"{name} window exceeded", [(k, x) for k, v in times.items() for x in window_excess(v, count, period)]
        )


async def _flow(cluster: Cluster, spans: dict[str, list[tuple[float, float]]], report: Report) -> None:
    """Step flow control: a key's steps executing at once against its parallelism (from the steps' own
    spans, which lie inside the slot), its window's starts against its rate (as the window took them)."""
    limits = FLOW_LIMITS
    peaks = {k: max_overlap(v) for k, v in sorted(spans.items())}
    report.figures["flow: max steps executing per key (limit)"] = {k: f"{p} ({limits[k][0]})" for k, p in peaks.items()}
    report.fail("flow parallelism exceeded", [(k, p) for k, p in peaks.items() if p > (limits[k][0] or p)])
    starts: dict[str, list[float]] = defaultdict(list)
    for key, at in await cluster.fetch("SELECT key, at FROM soak_flow_starts"):
        starts[key].append(at)
    busiest = {}
    for key, (_, rate, period) in sorted(limits.items()):
        if rate is None:
            continue
        busiest[key] = f"{_busiest(starts.get(key, []), period)} ({rate})"
        report.fail(f"flow rate window exceeded ({key})", window_excess(starts.get(key, []), rate, period))
    report.figures["flow: most starts in one window per key (limit)"] = busiest
    report.fail("flow keys never used", [k for k in limits if not starts.get(k) and not spans.get(k)])


def _busiest(times: list[float], period: float) -> int:
    ordered = sorted(times)
    most, lo = 0, 0
    for hi, t in enumerate(ordered):
        while t - ordered[lo] >= period - 1e-6:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


async def _schedule(cluster: Cluster, began: float, stopped: float, report: Report) -> None:
    firings = await cluster.fetch(
        "SELECT scheduled_at, status FROM lockgate_schedule_firings WHERE schedule = 'soak-every-2s' "
        "AND scheduled_at > %s AND scheduled_at <= %s ORDER BY scheduled_at",
        began + 2,  # the first slots may predate the workers' first tick (no backfill)
        stopped,
    )
    runs = await cluster.fetch("SELECT payload FROM lockgate_runs WHERE workflow = 'soak.tick'")
    per_slot = Counter(datetime.fromisoformat(json.loads(p)["at"]).timestamp() for (p,) in runs)
    slots = [float(s) for s, _ in firings]
    report.figures["schedule slots fired"] = len(slots)
    every = SCHEDULE_EVERY
    report.fail(
        "schedule slots missing",
        sorted(set(range(int(slots[0]), int(slots[-1]) + 1, every)) - {int(s) for s in slots})
        if slots
        else ["none fired"],
    )
    report.fail("schedule slots fired more than once", [s for s in slots if per_slot[s] > 1])
    report.fail("schedule slots without a run", [s for s in slots if per_slot[s] == 0])
    report.fail("schedule firings not succeeded", [(s, st) for s, st in firings if st != "succeeded"])


async def _batches(cluster: Cluster, arrivals: list[Arrival], report: Report) -> None:
    """Every item the gate took in (batched, or admitted as a batch's last) is in exactly one run."""
    taken = await cluster.fetch(
        "SELECT ticket FROM lockgate_ledger WHERE kind = 'arrival' AND workflow = 'soak.batched' "
        "AND outcome IN ('batched', 'admitted', 'queued')"
    )
    tickets = {t for (t,) in taken}
    items = {a.ticket: a.n for a in arrivals if a.workflow == "soak.batched" and a.ticket in tickets}
    runs = Counter(
        i["n"]
        for (payload,) in await cluster.fetch("SELECT payload FROM lockgate_runs WHERE workflow = 'soak.batched'")
        for i in json.loads(payload)["items"]
    )
    report.figures["batched items (runs)"] = f"{len(items)} ({sum(runs.values())} in runs)"
    report.fail("batched items in no run", [n for n in items.values() if runs[n] == 0])
    report.fail("batched items in more than one run", [n for n in items.values() if runs[n] > 1])


async def _events(cluster: Cluster, events: list[str], report: Report) -> None:
    rows = await cluster.fetch("SELECT event_id, status FROM lockgate_deliveries WHERE event_id = ANY(%s)", events)
    per = Counter(e for e, s in rows if s == "started")
    report.figures["events published"] = len(events)
    report.fail("events not delivered exactly once", [e for e in events if per[e] != 1])
    runs = await cluster.fetch("SELECT COUNT(*) FROM lockgate_runs WHERE workflow = 'soak.pinged'")
    report.figures["event-triggered runs"] = runs[0][0]
    report.fail("event-triggered runs missing or doubled", [runs[0][0]] if runs[0][0] != len(events) else [])
