"""Schedules as an operator reads them: each with its next firing, and the firing ledger.

Both reads take the declared schedules (``App.schedules()``; empty without an app): a
schedule stored but declared by no code here is still listed and its ledger read, and is
shown orphaned once an engine without it has marked it so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ..clock import to_datetime
from ..durations import format_seconds
from ..errors import InvalidArgument
from ..schedule import ScheduleDef, unknown_schedule
from ..schedule_options import from_row
from ..store import schedules as sched_ops
from ..store.base import Row, Tx
from .schedule_views import check_page_limit

__all__ = ["FiringInfo", "ScheduleInfo", "firings_page", "schedule_info_page", "schedule_infos"]


@dataclass(frozen=True)
class ScheduleInfo:
    """One schedule as an operator sees it."""

    name: str
    workflow: str
    spec: str
    timezone: str
    paused: bool
    paused_reason: str | None
    orphaned: bool
    next_at: datetime | None
    last_slot: datetime | None
    missed: int
    firings: dict[str, int]
    on_overlap: str | None
    backfill: str | None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["next_at"] = _iso(self.next_at)
        out["last_slot"] = _iso(self.last_slot)
        return out


@dataclass(frozen=True)
class FiringInfo:
    """One row of the firing ledger."""

    id: int
    schedule: str
    scheduled_at: datetime
    cause: str
    status: str
    why: str | None
    source: str
    workflow: str
    idempotency_key: str
    run_id: str | None
    ticket: str | None
    start_status: str | None
    owner: str | None
    claimed_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: Row) -> FiringInfo:
        return cls(
            id=int(row["id"]),
            schedule=row["schedule"],
            scheduled_at=_at(row["scheduled_at"]),
            cause=row["cause"],
            status=row["status"],
            why=row["why"],
            source=row["source"] + ("+manual" if row["manual"] else ""),
            workflow=row["workflow"],
            idempotency_key=row["idempotency_key"],
            run_id=row["run_id"],
            ticket=row["ticket"],
            start_status=row["start_status"],
            owner=row["owner"],
            claimed_at=_at(row["claimed_at"]),
            started_at=to_datetime(row["started_at"]),
            finished_at=to_datetime(row["finished_at"]),
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("scheduled_at", "claimed_at", "started_at", "finished_at"):
            out[key] = _iso(out[key])
        return out


async def schedule_infos(tx: Tx, declared: Mapping[str, ScheduleDef], now: float) -> list[ScheduleInfo]:
    """Every schedule, declared or stored, with its next slot after ``now`` (orphaned ones have none)."""
    states = {row["name"]: row for row in await sched_ops.schedule_states(tx)}
    return await _infos(tx, declared, states, sorted(set(states) | set(declared)), now, every=True)


async def schedule_info_page(
    tx: Tx,
    declared: Mapping[str, ScheduleDef],
    now: float,
    *,
    limit: int,
    cursor: str | None = None,
    workflow: str | None = None,
    prefix: str | None = None,
) -> tuple[list[ScheduleInfo], str | None]:
    """``schedule_infos`` a page at a time, by name after ``cursor``: the page and the next cursor (``None``
    at the end). Reads the page's rows and their firings only, however many schedules the store holds."""
    check_page_limit(limit)
    rows = await sched_ops.schedules_page(
        tx, cursor=cursor or "", limit=limit + 1, workflow=workflow, prefix=prefix or None, paused=None
    )
    states = {row["name"]: row for row in rows[:limit]}
    last = rows[limit - 1]["name"] if len(rows) > limit else None  # the page ends there; else it runs to the end
    # A schedule declared here and not stored yet (no engine has booted with it) is listed at its place.
    unstored = [
        name
        for name, sched in declared.items()
        if name not in states
        and name > (cursor or "")
        and (last is None or name <= last)
        and (workflow is None or sched.workflow == workflow)
        and (not prefix or name.startswith(prefix))
    ]
    names = sorted([*states, *unstored])
    infos = await _infos(tx, declared, states, names[:limit], now, every=False)
    more = len(rows) > limit or len(names) > limit
    return infos, (infos[-1].name if more and infos else None)


async def _infos(
    tx: Tx, declared: Mapping[str, ScheduleDef], states: Mapping[str, Row], names: list[str], now: float, *, every: bool
) -> list[ScheduleInfo]:
    counts: dict[str, dict[str, int]] = {}
    for row in await sched_ops.firing_counts(tx, None if every else names):
        counts.setdefault(row["schedule"], {})[row["status"]] = int(row["n"])
    out = []
    for name in names:
        state, sched = states.get(name), declared.get(name)
        if sched is None and state is not None and state["origin"] == "runtime":
            sched = from_row(state)[0]
        paused = bool(state and state["paused"])
        out.append(
            ScheduleInfo(
                name=name,
                workflow=sched.workflow if sched else state["workflow"] if state else "",
                spec=sched.spec if sched else state["spec"] if state else "",
                timezone=sched.timezone if sched else state["timezone"] if state else "",
                paused=paused,
                paused_reason=state["paused_reason"] if state else None,
                # The durable mark an engine left, unless this code declares the schedule (again).
                orphaned=sched is None and state is not None and state["orphaned_at"] is not None,
                next_at=None if sched is None or paused else _next(sched, now),
                last_slot=None if state is None or state["watermark"] is None else _at(state["watermark"]),
                missed=int(state["missed"]) if state else 0,
                firings=counts.get(name, {}),
                on_overlap=sched.on_overlap if sched else None,
                backfill=_backfill(sched),
            )
        )
    return out


async def firings_page(tx: Tx, declared: Mapping[str, ScheduleDef], name: str, limit: int) -> list[FiringInfo]:
    """The firing ledger of ``name``, newest claim first; ``InvalidArgument`` for a schedule nobody knows."""
    if limit < 1:
        raise InvalidArgument("limit must be >= 1")
    rows = await sched_ops.firings_of(tx, name, limit)
    # A deleted runtime schedule's ledger is still read while it holds firings.
    if not rows and name not in declared and await sched_ops.schedule_state(tx, name) is None:
        raise unknown_schedule(declared, name)
    return [FiringInfo.from_row(r) for r in rows]


def _next(sched: ScheduleDef, now: float) -> datetime | None:
    slot = sched.next_after(now)
    return None if math.isinf(slot) else sched.local(slot)


def _backfill(sched: ScheduleDef | None) -> str | None:
    if sched is None or sched.backfill is None:
        return None
    return sched.backfill if isinstance(sched.backfill, str) else format_seconds(sched.backfill)


def _at(epoch: Any) -> datetime:
    return datetime.fromtimestamp(float(epoch), tz=UTC)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
