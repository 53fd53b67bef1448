"""One schedule, or a page of them, as ``client.schedules.get`` / ``.list`` return them.

Both read the schedules' rows: a runtime schedule shows its stored options, a declared one the
options of the code that declares it here (or, declared by other code, only what its row holds).
A page is ordered by id and resumed from a cursor (the last id of the previous page).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ..clock import to_datetime
from ..errors import InvalidArgument, UnknownSchedule
from ..schedule import ScheduleDef
from ..schedule_options import from_row
from ..store import schedules as sched_ops
from ..store.base import Row, Tx

__all__ = ["PAGE_LIMIT", "SchedulePage", "ScheduleView", "check_page_limit", "schedule_view", "schedules_page"]

PAGE_LIMIT = 1000


@dataclass(frozen=True)
class ScheduleView:
    """A schedule's definition and state. ``origin``: ``declared`` (its code owns it) or ``runtime``."""

    id: str
    workflow: str
    origin: str
    cron: str | None
    every: float | None
    timezone: str
    payload: Any
    on_overlap: str | None
    buffer_limit: int | None
    backfill: str | float | None
    jitter: float | None
    max_runtime: float | None
    start_at: datetime | None
    end_at: datetime | None
    note: str | None
    paused: bool
    paused_reason: str | None
    orphaned: bool
    next_at: datetime | None
    watermark: datetime | None
    missed: int
    revision: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Row, declared: Mapping[str, ScheduleDef]) -> ScheduleView:
        note: str | None = None
        defn: ScheduleDef | None
        if row["origin"] == "runtime":
            defn, note = from_row(row)
        else:
            defn = declared.get(row["name"])
        spec = str(row["spec"])
        return cls(
            id=row["name"],
            workflow=row["workflow"],
            origin=row["origin"],
            cron=defn.cron if defn else (spec.removeprefix("cron ") if spec.startswith("cron ") else None),
            every=defn.every if defn else None,
            timezone=row["timezone"],
            payload=None if defn is None or callable(defn.payload) else defn.payload,
            on_overlap=defn.on_overlap if defn else None,
            buffer_limit=defn.buffer_limit if defn else None,
            backfill=defn.backfill if defn else None,
            jitter=defn.jitter if defn else None,
            max_runtime=defn.max_runtime if defn else None,
            start_at=to_datetime(defn.start_at) if defn else None,
            end_at=to_datetime(defn.end_at) if defn else None,
            note=note,
            paused=bool(row["paused"]),
            paused_reason=row["paused_reason"],
            orphaned=row["orphaned_at"] is not None,
            next_at=_slot_of(row, defn),
            watermark=to_datetime(row["watermark"]),
            missed=int(row["missed"]),
            revision=int(row["revision"]),
            created_at=datetime.fromtimestamp(float(row["created_at"]), tz=UTC),
            updated_at=datetime.fromtimestamp(float(row["updated_at"]), tz=UTC),
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, datetime):
                out[key] = value.isoformat()
        return out


@dataclass(frozen=True)
class SchedulePage:
    """A page of schedules; ``cursor`` resumes after it (``None``: this was the last page)."""

    items: list[ScheduleView]
    cursor: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"items": [i.to_dict() for i in self.items], "cursor": self.cursor}


def _slot_of(row: Row, defn: ScheduleDef | None) -> datetime | None:
    """The schedule's next slot: after its watermark, where its definition is known and it is live."""
    if row["next_at"] is None or row["paused"] or row["orphaned_at"] is not None:
        return None
    if defn is None or row["watermark"] is None or not defn.jitter:
        return to_datetime(row["next_at"])  # without jitter, next_at is the slot itself
    slot = defn.next_after(float(row["watermark"]))
    return None if slot == float("inf") else datetime.fromtimestamp(slot, tz=UTC)


async def schedule_view(tx: Tx, declared: Mapping[str, ScheduleDef], schedule_id: str) -> ScheduleView:
    """Schedule ``schedule_id``; ``UnknownSchedule`` if no row holds it."""
    row = await sched_ops.schedule_state(tx, schedule_id)
    if row is None:
        raise UnknownSchedule(schedule_id)
    return ScheduleView.from_row(row, declared)


def check_page_limit(limit: Any) -> None:
    """A page's ``limit``: 1 to ``PAGE_LIMIT`` (``InvalidArgument`` otherwise)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= PAGE_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {PAGE_LIMIT}, got {limit!r}")


async def schedules_page(
    tx: Tx,
    declared: Mapping[str, ScheduleDef],
    *,
    workflow: str | None = None,
    prefix: str | None = None,
    paused: bool | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> SchedulePage:
    """Schedules by id after ``cursor``: of ``workflow``, with ids starting ``prefix``, ``paused`` or not."""
    check_page_limit(limit)
    rows = await sched_ops.schedules_page(
        tx, cursor=cursor or "", limit=limit + 1, workflow=workflow, prefix=prefix or None, paused=paused
    )
    items = [ScheduleView.from_row(r, declared) for r in rows[:limit]]
    return SchedulePage(items, items[-1].id if len(rows) > limit else None)
