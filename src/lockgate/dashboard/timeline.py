"""A run's step timeline: one row per journal entry, a bar per step attempt on a shared time axis.

Retries show as separate bars on their step's row with the gap between them; sleeps, signals,
updates, children and the gate's own wait before the run began are drawn as hatched waits
with their reason. Positions are percentages of the axis, so the page needs no script to draw it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..inspect import RunDetail
from ..records import AttemptInfo, StepInfo
from .render import span

__all__ = ["Bar", "Lane", "Timeline", "build_timeline"]

WAIT_KINDS = {
    "sleep": "sleep",
    "signal": "waiting for a signal",
    "update": "waiting for an update",
    "child": "child run",
    "wait_child": "waiting for a child",
    "cancel": "cancel requested (compensate)",
}


@dataclass(frozen=True)
class Bar:
    """One bar: ``left`` and ``width`` in percent of the axis; ``kind`` styles it (a status or ``wait``)."""

    left: float
    width: float
    kind: str
    label: str
    title: str


@dataclass
class Lane:
    """One row of the timeline: a journal entry (or the gate) with its bars."""

    label: str
    kind: str
    bars: list[Bar] = field(default_factory=list)
    step: StepInfo | None = None
    attempts: list[AttemptInfo] = field(default_factory=list)


@dataclass(frozen=True)
class Timeline:
    """The lanes and the axis ticks (``(left percent, label)``) from ``start`` to ``end``."""

    start: datetime
    end: datetime
    lanes: list[Lane]
    ticks: list[tuple[float, str]]


class _Axis:
    def __init__(self, start: datetime, end: datetime) -> None:
        self.start = start
        self.total = max((end - start).total_seconds(), 0.001)

    def bar(self, begin: datetime, end: datetime, kind: str, label: str, title: str) -> Bar:
        left = (begin - self.start).total_seconds() / self.total * 100
        width = (end - begin).total_seconds() / self.total * 100
        left = min(max(left, 0.0), 100.0)
        return Bar(round(left, 3), round(max(min(width, 100.0 - left), 0.4), 3), kind, label, title)


def build_timeline(detail: RunDetail, now: datetime, gate_wait: float | None = None) -> Timeline:
    """The timeline of ``detail`` as of ``now``; ``gate_wait``: seconds its start waited at the gate."""
    run = detail.run
    admitted = run.created_at
    start = admitted - timedelta(seconds=gate_wait) if gate_wait else admitted
    end = run.finished_at or now
    for step in detail.steps:
        for moment in (step.finished_at, step.due_at if step.status == "pending" else None):
            if moment is not None and moment > end:
                end = moment
    axis = _Axis(start, end)
    lanes: list[Lane] = []
    if gate_wait:
        lane = Lane("gate", "gate")
        lane.bars.append(axis.bar(start, admitted, "wait", "flow", f"waited {span(gate_wait)} at the gate"))
        lanes.append(lane)
    by_key: dict[str, list[AttemptInfo]] = {}
    for attempt in detail.attempts:
        by_key.setdefault(attempt.step_key, []).append(attempt)
    for step in sorted(detail.steps, key=lambda s: s.seq):
        lane = Lane(step.key, step.kind, step=step, attempts=sorted(by_key.get(step.key, []), key=lambda a: a.attempt))
        if step.kind in ("step", "compensation"):  # a compensation is a step run to undo one
            _step_bars(lane, step, axis, now)
        elif step.started_at is not None:
            finish = step.finished_at or (now if step.status == "pending" else step.started_at)
            reason = WAIT_KINDS.get(step.kind, step.kind)
            if step.kind == "sleep" and step.due_at is not None:
                reason = f"sleep until {step.due_at:%H:%M:%S}"
            title = f"{reason}: {span((finish - step.started_at).total_seconds())}"
            lane.bars.append(axis.bar(step.started_at, finish, "wait", reason, title))
        lanes.append(lane)
    if run.waiting_on and run.finished_at is None and not any(s.key == run.waiting_on for s in detail.steps):
        # a wait the journal records only once it ends: from the last thing the run did until now
        since = max((s.finished_at for s in detail.steps if s.finished_at is not None), default=admitted)
        kind = run.waiting_on.split(":", 1)[0]
        reason = f"{WAIT_KINDS.get(kind, kind)} ({run.waiting_on})"
        lane = Lane(run.waiting_on, kind)
        lane.bars.append(axis.bar(since, now, "wait", reason, f"{reason} for {span((now - since).total_seconds())}"))
        lanes.append(lane)
    return Timeline(start, end, lanes, _ticks(start, axis.total))


def _step_bars(lane: Lane, step: StepInfo, axis: _Axis, now: datetime) -> None:
    attempts = [a for a in lane.attempts if a.started_at is not None]
    if not attempts and step.started_at is not None:
        finish = step.finished_at or now
        lane.bars.append(
            axis.bar(
                step.started_at, finish, step.status, step.name, f"{step.status} in {_took(step.started_at, finish)}"
            )
        )
        return
    previous: datetime | None = None
    for attempt in attempts:
        assert attempt.started_at is not None
        finish = attempt.finished_at or now
        if previous is not None and attempt.started_at > previous:
            waited = (attempt.started_at - previous).total_seconds()
            lane.bars.append(axis.bar(previous, attempt.started_at, "wait", "retry", f"retry backoff {span(waited)}"))
        status = "running" if attempt.status == "running" else attempt.status
        title = f"attempt {attempt.attempt}: {status} in {_took(attempt.started_at, finish)}"
        if attempt.error_tag:
            title += f" ({attempt.error_tag}: {attempt.error_message})"
        lane.bars.append(axis.bar(attempt.started_at, finish, status, f"#{attempt.attempt}", title))
        previous = finish


def _took(begin: datetime, end: datetime) -> str:
    return span((end - begin).total_seconds())


def _ticks(start: datetime, total: float) -> list[tuple[float, str]]:
    return [(i * 25.0, "+" + span(total * i / 4) if i else start.strftime("%H:%M:%S")) for i in range(5)]
