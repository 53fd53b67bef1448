"""The nemesis run's checker: every invariant, read back from lockgate's tables and the side tables.

- every acknowledged start and event is accounted for (a ledger row and a terminal fate), except
  what an asynchronous failover lost: those acknowledged after the standby was last known to have
  everything (the harness measures that instant) are counted;
- no journaled step ran again: a step executed again after an execution that completed is allowed
  only when a fault explains it (that worker killed, frozen, cut off or stopped, or the database
  restarted or failed over, within a few seconds of it), and no execution begins after the one the
  journal kept had ended;
- no limit exceeded at any instant, by the spans the steps recorded on the side server's clock
  (a run executed twice at once, a zombie and its taker, holds one slot: spans are merged per run);
- no schedule slot or event delivery doubled (but where one of the runs is missing from the new
  primary: a run an asynchronous failover lost, whose steps had acted); no timer early; no run left running.

Every execution beyond the first of a step is *wasted*; each is put down to the fault that explains it.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..cluster.harness import Cluster
from ..soak.checks import max_overlap
from .app import CONCURRENCY, FLOW, NAP
from .faults import KINDS, WORKER_FAULTS, Fault

__all__ = ["Arrival", "Report", "check"]

TERMINAL = {"succeeded", "failed", "cancelled"}
SETTLED_AT_ARRIVAL = {"admitted", "existing", "dropped", "skipped"}
PARKED_AT_ARRIVAL = {"queued", "collapsed", "batched"}
EXPLAINS = 5.0  # seconds after a step's execution within which a fault explains running it again
LAPSE = "lapse"  # no fault: the worker could not renew the run's lease in time and said so (it stopped the run)


@dataclass
class Arrival:
    workflow: str
    ticket: str
    status: str
    run_id: str | None
    n: int
    at: float  # when it was acknowledged (time.time())


@dataclass
class Report:
    figures: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # kind: seconds
    wasted: Counter[str] = field(default_factory=Counter)  # kind: executions beyond the first

    def fail(self, what: str, items: list[Any]) -> None:
        if items:
            self.violations.append(f"{what}: {len(items)} (e.g. {items[:5]})")

    def table(self) -> str:
        """Per nemesis: faults injected, takeover or downtime seconds (median / max), wasted step executions."""
        rows = [("nemesis", "faults", "takeover/downtime s (median / max)", "wasted step executions")]
        count = Counter(f.kind for f in self.faults)
        for kind in [*KINDS, LAPSE, "other"]:
            if not count[kind] and not self.wasted[kind]:
                continue
            seconds = self.latency.get(kind, [])
            shown = f"{statistics.median(seconds):.2f} / {max(seconds):.2f}" if seconds else "-"
            rows.append((kind, str(count[kind]), shown, str(self.wasted[kind])))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        return "\n".join(lines)

    def render(self) -> str:
        width = max(len(k) for k in self.figures) if self.figures else 0
        lines = [self.table(), ""]
        lines += [f"  {k.ljust(width)}  {v}" for k, v in self.figures.items()]
        lines.append(f"  {'violations'.ljust(width)}  {len(self.violations)}")
        lines += [f"    - {v}" for v in self.violations]
        return "\n".join(lines)


def _lost_window(faults: list[Fault], at: float) -> bool:
    """Whether an acknowledgement at ``at`` may have been lost by an asynchronous failover."""
    # Until the promotion, not the kill: a backend of the killed primary may still acknowledge a commit.
    return any(f.kind == "failover-async" and f.cut <= at <= f.ended for f in faults)


async def check(
    group: Cluster,
    side: Cluster,
    arrivals: list[Arrival],
    events: list[tuple[str, int, float]],
    faults: list[Fault],
    window: tuple[float, float],
    lapsed: Collection[tuple[int, str]] = (),
) -> Report:
    report = Report(faults=faults)
    effects = await side.fetch("SELECT id, run_id, step, kind, tag, pid, at FROM nem_effects ORDER BY at, id")
    await _arrivals(group, arrivals, faults, report)
    await _runs(group, window[1], report)
    await _steps(group, effects, faults, lapsed, report)
    await _limits(side, faults, report)
    await _timers(group, effects, report)
    present = {r[0] for r in await group.fetch("SELECT id FROM lockgate_runs")}
    _doubles(effects, events, faults, present, report)
    _latency(effects, arrivals, faults, report)
    report.figures["faults injected"] = dict(Counter(f.kind for f in faults))
    report.figures["wasted step executions"] = sum(report.wasted.values())
    return report


async def _arrivals(group: Cluster, arrivals: list[Arrival], faults: list[Fault], report: Report) -> None:
    rows = await group.fetch("SELECT ticket, outcome, pending_id, run_id FROM lockgate_ledger WHERE kind = 'arrival'")
    ledger = {r[0]: r for r in rows}
    drains: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for pending_id, outcome, run_id in await group.fetch(
        "SELECT pending_id, outcome, run_id FROM lockgate_ledger WHERE kind = 'drain' AND pending_id IS NOT NULL"
    ):
        drains[pending_id].append((outcome, run_id))
    statuses = dict(await group.fetch("SELECT id, status FROM lockgate_runs"))
    lost: list[str] = []
    missing: list[str] = []
    unsettled: list[Any] = []
    for arrival in arrivals:
        found = ledger.get(arrival.ticket)
        if found is None:
            (lost if _lost_window(faults, arrival.at) else missing).append(arrival.ticket)
            continue
        _, outcome, pending_id, run_id = found
        if outcome in SETTLED_AT_ARRIVAL:
            if run_id is not None and statuses.get(run_id) not in TERMINAL:
                unsettled.append((arrival.ticket, outcome, statuses.get(run_id)))
        elif outcome in PARKED_AT_ARRIVAL:
            ended = [f for f in drains.get(pending_id or "", []) if f[0] != "queued"]
            if not ended or any(r is not None and statuses.get(r) not in TERMINAL for _, r in ended):
                unsettled.append((arrival.ticket, outcome, ended))
        else:
            unsettled.append((arrival.ticket, outcome, "unknown outcome"))
    report.figures["arrivals (acknowledged starts)"] = len(arrivals)
    report.figures["acknowledged starts lost by an asynchronous failover"] = len(lost)
    report.fail("acknowledged starts missing (no asynchronous failover explains them)", missing)
    report.fail("acknowledged starts without a terminal fate", unsettled)


async def _runs(group: Cluster, stopped: float, report: Report) -> None:
    rows = await group.fetch(
        "SELECT workflow, status, COUNT(*) FROM lockgate_runs WHERE workflow <> 'nem.tick' OR created_at <= %s "
        "GROUP BY workflow, status",
        stopped,
    )
    report.figures["runs"] = sum(r[2] for r in rows)
    per: dict[str, dict[str, int]] = defaultdict(dict)
    for workflow, status, count in rows:
        per[workflow][status] = count
    report.figures["runs per workflow"] = dict(sorted(per.items()))
    report.fail("runs stuck (not terminal)", [r for r in rows if r[1] not in TERMINAL])
    report.fail("runs failed or cancelled", [r for r in rows if r[1] in ("failed", "cancelled")])
    taken = await group.fetch("SELECT COUNT(*) FROM lockgate_runs WHERE epoch > 1")
    report.figures["runs claimed more than once (takeovers, resumptions)"] = taken[0][0]


def _explain(faults: list[Fault], pids: set[int], began: float, ended: float, again: float) -> str | None:
    """The fault that explains running again (at ``again``) an execution over ``[began, ended]``.

    One that hit the worker of either execution (a zombie's retry runs it again too) or the database
    (until ``EXPLAINS`` after it ended: a worker whose connections it broke reconnects with backoff),
    between the execution's start and the new one, within ``EXPLAINS`` of the execution's end (its
    journal entry commits within milliseconds when nothing fails)."""
    for f in faults:
        if f.kind in WORKER_FAULTS and f.pid not in pids:
            continue
        start = f.cut if f.kind == "failover-async" else f.began
        end = f.ended if f.kind in WORKER_FAULTS else f.ended + EXPLAINS
        if start <= again and end >= began - 0.1 and start - ended <= EXPLAINS:
            return f.kind
    return None


def _zombie(faults: list[Fault], pid: int, at: float) -> bool:
    """Whether ``pid`` was frozen or cut off shortly before ``at``."""
    return any(f.pid == pid and f.kind in ("stop", "partition") and f.began <= at <= f.ended + EXPLAINS for f in faults)


def _held_back(faults: list[Fault], pid: int, ended: float) -> bool:
    """Whether the journal entry of an execution by ``pid`` that ended at ``ended`` may have committed long after:
    its worker was frozen or cut off as it ended (the write waited for it), and an asynchronous failover later
    lost the takeover that would have refused the write. Another worker's execution begun meanwhile was not
    begun after the entry the journal kept."""
    held = any(
        f.pid == pid and f.kind in ("stop", "partition") and f.began <= ended + EXPLAINS and f.ended >= ended
        for f in faults
    )
    return held and any(f.kind == "failover-async" and f.ended >= ended for f in faults)


async def _steps(
    group: Cluster,
    effects: list[tuple[Any, ...]],
    faults: list[Fault],
    lapsed: Collection[tuple[int, str]],
    report: Report,
) -> None:
    runs: dict[tuple[str, str], list[tuple[str, int, int, float]]] = defaultdict(list)  # (kind, id, pid, at)
    for eid, run_id, step, kind, _, pid, at in effects:
        runs[(run_id, step)].append((kind, eid, pid, at))
    journal: dict[tuple[str, str], int] = {}
    for run_id, key, output in await group.fetch(
        "SELECT run_id, step_key, output FROM lockgate_journal WHERE kind = 'step' AND output IS NOT NULL"
    ):
        value = json.loads(output)
        if isinstance(value, int):
            journal[(run_id, key.split("#")[0])] = value
    done_at = {eid: at for (kind, eid, _, at) in (e for v in runs.values() for e in v) if kind == "done"}
    done_by = {eid: pid for (kind, eid, pid, _) in (e for v in runs.values() for e in v) if kind == "done"}
    rerun, after_kept, executions = [], [], 0
    for (run_id, step), marks in runs.items():
        begun = [(pid, at) for kind, _, pid, at in marks if kind == "begun"]
        done = [(pid, at) for kind, _, pid, at in marks if kind == "done"]
        executions += len(begun)
        for (pid, at), (again_pid, again) in itertools.pairwise(begun):
            ends = [d_at for d_pid, d_at in done if d_pid == pid and at <= d_at <= again]
            ended = ends[0] if ends else at
            why = _explain(faults, {pid, again_pid}, at, ended, again)
            if why is None and (pid, run_id) in lapsed:
                why = LAPSE  # its worker logged that it could not renew this run's lease in time, and stopped it
            report.wasted[why or "other"] += 1
            if ends and why is None:
                rerun.append((run_id, step, pid, round(again - ended, 3)))
        kept = journal.get((run_id, step))
        if kept is not None and kept in done_at and not _held_back(faults, done_by[kept], done_at[kept]):
            late = [
                (pid, at) for pid, at in begun if at > done_at[kept] and not _zombie(faults, pid, at)
            ]  # a zombie (frozen, cut off) may try a step again before it learns its lease is gone
            if late:
                after_kept.append((run_id, step, kept))
    report.figures["step executions"] = executions
    report.fail("completed steps run again with no fault to explain it", rerun)
    report.fail("executions begun after the one the journal kept had ended", after_kept)


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


async def _limits(side: Cluster, faults: list[Fault], report: Report) -> None:
    """Limits bind what bodies execute, by their own timestamps. A frozen process executes nothing: a span
    across a SIGSTOP counts before it and after the thaw (until the lease watch cancels the body), not
    while frozen. A span with no end was cut by a kill (it ends at the kill) or its end was lost with its
    process: it counts for its step's hold."""
    killed = {f.pid: f.began for f in faults if f.kind in ("kill", "skew")}
    frozen = [f for f in faults if f.kind == "stop"]
    per: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for run_id, key, pid, started, ended in await side.fetch(
        "SELECT run_id, key, pid, started_at, ended_at FROM nem_spans"
    ):
        end = ended if ended is not None else max(started, killed.get(pid, started + 0.3))
        pieces = [(started, end)]
        for f in frozen:
            if f.pid == pid:
                pieces = [p for s, e in pieces for p in ((s, min(e, f.began)), (max(s, f.ended), e)) if p[0] < p[1]]
        per[key][run_id] += pieces
    peaks = {}
    for key, runs in sorted(per.items()):
        spans = [s for run in runs.values() for s in _merged(run)]
        peaks[key] = max_overlap(spans)
    limits = {k: CONCURRENCY if k.startswith("limit:") else FLOW for k in peaks}
    report.figures["most runs executing at once per key (limit)"] = {k: f"{p} ({limits[k]})" for k, p in peaks.items()}
    report.fail("limits exceeded", [(k, p) for k, p in peaks.items() if p > limits[k]])


async def _timers(group: Cluster, effects: list[tuple[Any, ...]], report: Report) -> None:
    sleepers = {r[0] for r in await group.fetch("SELECT id FROM lockgate_runs WHERE workflow = 'nem.sleeping'")}
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    for _, run_id, step, kind, _, _, at in effects:
        if run_id in sleepers and step == "before" and kind == "done":
            before.setdefault(run_id, at)
        if run_id in sleepers and step == "after" and kind == "begun":
            after.setdefault(run_id, at)
    gaps = {r: after[r] - before[r] for r in after if r in before}
    report.figures[f"durable timers ({NAP:g}s): shortest wait"] = round(min(gaps.values()), 3) if gaps else None
    report.fail("timers fired early", [(r, round(g, 3)) for r, g in gaps.items() if g < NAP - 0.05])


def _doubles(
    effects: list[tuple[Any, ...]],
    events: list[tuple[str, int, float]],
    faults: list[Fault],
    present: set[str],
    report: Report,
) -> None:
    """A slot or an event run by more runs than one: doubled, unless all but one of those runs are missing from
    the database (lost by an asynchronous failover: their rows were never on the promoted standby, so the
    slot fired, or the event was delivered, again there)."""
    by_tag: dict[tuple[str, str], set[str]] = defaultdict(set)  # (step family, tag): run ids that did it
    for _, run_id, _step, kind, tag, _, _ in effects:
        if tag and kind == "done":
            by_tag[("tick" if "." in tag else "ping", tag)].add(run_id)
    failed_over = any(f.kind == "failover-async" for f in faults)

    def doubled(runs: set[str]) -> bool:
        return len(runs & present) > 1 or (len(runs) > 1 and not failed_over)

    slots = {tag: runs for (family, tag), runs in by_tag.items() if family == "tick"}
    report.figures["schedule slots run"] = len(slots)
    report.figures["schedule slots run again after an asynchronous failover lost their run"] = sum(
        1 for r in slots.values() if len(r) > 1 and not doubled(r)
    )
    report.fail("schedule slots run more than once", [t for t, r in slots.items() if doubled(r)])
    pings = {n: by_tag.get(("ping", str(n)), set()) for _, n, _ in events}
    runs = {n: len(r) for n, r in pings.items()}
    acked = {n: at for _, n, at in events}
    report.figures["events published (acknowledged)"] = len(events)
    report.figures["events delivered again after an asynchronous failover lost their run"] = sum(
        1 for r in pings.values() if len(r) > 1 and not doubled(r)
    )
    report.fail("events delivered more than once", [n for n, r in pings.items() if doubled(r)])
    report.fail(
        "events never delivered",
        [n for n, c in runs.items() if c == 0 and not _lost_window(faults, acked[n])],
    )


def _latency(effects: list[tuple[Any, ...]], arrivals: list[Arrival], faults: list[Fault], report: Report) -> None:
    """Takeover: from a worker fault to the next step of one of its runs begun elsewhere; downtime: from a
    database fault to the next acknowledged start."""
    acks = sorted(a.at for a in arrivals)
    for f in faults:
        if f.kind in ("failover-sync", "failover-async", "restart"):
            # The longest wait for an acknowledgement while the fault lasted (a restart's burst straddles it).
            inside = [f.began, *(at for at in acks if f.began < at <= f.ended)]
            after = [at for at in acks if at > f.ended]
            if after:
                inside.append(after[0])
                report.latency[f.kind].append(max(b - a for a, b in itertools.pairwise(inside)))
            continue
        if f.kind == "skew":
            continue
        cut = {
            (r, step)
            for _, r, step, kind, _, pid, at in effects
            if pid == f.pid and kind == "begun" and f.began - EXPLAINS <= at <= f.began
        }
        cut -= {
            (r, step) for _, r, step, kind, _, pid, at in effects if pid == f.pid and kind == "done" and at <= f.began
        }
        again = [
            at - f.began
            for _, r, step, kind, _, pid, at in effects
            if (r, step) in cut and pid != f.pid and kind == "begun" and at > f.began
        ]
        if again:
            report.latency[f.kind].append(min(again))
