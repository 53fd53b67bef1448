"""The flow page's data: per workflow and key over a window, with admissions per bucket as a sparkline,
and the pending queue with each start's position and estimated admission."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ..errors import InvalidArgument
from ..inspect import FlowKeyRow, FlowRow, Inspector, LedgerEntry, ParkedStart, Pause, Trace

__all__ = ["BUCKETS", "WINDOWS", "FlowPage", "Sparkline", "flow_page", "sparkline"]

WINDOWS = {"15m": 900, "1h": 3600, "6h": 21600, "24h": 86400, "7d": 604800}
BUCKETS = 30
TRACED = 20  # parked starts whose position and ETA are read (one trace each)


@dataclass(frozen=True)
class Sparkline:
    """Admissions per bucket of a window as SVG polyline points (``width`` x ``height``)."""

    points: str
    peak: int
    total: int
    width: int = 120
    height: int = 24


def sparkline(counts: list[int], width: int = 120, height: int = 24) -> Sparkline:
    """The polyline of ``counts`` scaled to its peak (a flat line at the bottom for none)."""
    peak = max(counts, default=0)
    step = width / max(len(counts) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{height - 1 - (c / peak * (height - 2) if peak else 0):.1f}" for i, c in enumerate(counts)
    )
    return Sparkline(points, peak, sum(counts), width, height)


@dataclass(frozen=True)
class Queued:
    """A parked start with its place in its queue and when it should be admitted (when known)."""

    start: ParkedStart
    position: int | None
    eta: datetime | None


@dataclass
class FlowPage:
    window: str
    since: datetime
    rows: list[tuple[FlowRow, Sparkline]] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)  # concurrency limit per workflow that declares one
    queue: list[Queued] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)
    decisions: list[LedgerEntry] = field(default_factory=list)
    bucket: str = ""
    keys: list[FlowKeyRow] = field(default_factory=list)  # step flow-control keys (with a weighted key's units)


async def flow_page(inspector: Inspector, window: str, workflow: str | None = None) -> FlowPage:
    """Everything the flow page shows for ``window`` (one of ``WINDOWS``)."""
    if window not in WINDOWS:
        raise InvalidArgument(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
    seconds = WINDOWS[window]
    now = inspector.clock.now()
    since = datetime.fromtimestamp(now - seconds, tz=UTC)
    rows, counts, parked, pauses, decisions, keys = await asyncio.gather(
        inspector.flow(workflow, since=since),
        inspector.admissions(since, buckets=BUCKETS, workflow=workflow),
        inspector.parked(workflow=workflow, limit=100),
        inspector.pauses(),
        inspector.ledger(workflow=workflow, limit=20),
        inspector.flow_keys(),
    )
    width = seconds / BUCKETS
    quiet = [0] * BUCKETS
    traces = await asyncio.gather(*(_trace(inspector, p.ticket) for p in parked[:TRACED]))
    queue = [
        Queued(p, t.position if t else None, t.estimated_admission if t else None)
        for p, t in zip(parked, [*traces, *([None] * max(0, len(parked) - TRACED))], strict=True)
    ]
    return FlowPage(
        window=window,
        since=since,
        rows=[(r, sparkline(counts.get((r.workflow, r.key), quiet))) for r in rows],
        queue=queue,
        pauses=pauses,
        decisions=decisions,
        bucket=_bucket_label(width),
        keys=keys,
        limits={
            name: d.gate.concurrency.limit
            for name, d in inspector.app.definitions().items()
            if d.gate is not None and d.gate.concurrency is not None
        },
    )


async def _trace(inspector: Inspector, ticket: str) -> Trace | None:
    try:
        return await inspector.trace(ticket)
    except Exception:  # the start left the queue between the two reads
        return None


def _bucket_label(seconds: float) -> str:
    delta = timedelta(seconds=seconds)
    if delta < timedelta(minutes=1):
        return f"{int(seconds)}s"
    if delta < timedelta(hours=1):
        return f"{int(seconds // 60)}m"
    return f"{seconds / 3600:g}h"
