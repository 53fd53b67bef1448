"""A runtime schedule's options: validated as a declaration is, and kept as JSON in its row.

A schedule created by a call (``client.schedules.create``) is the same ``ScheduleDef`` a
declaration builds, with two limits a stored row imposes: its payload is data (a dict or a
model, never a callback), and it may carry ``start_at`` / ``end_at`` bounds. ``options_json``
writes what the row keeps; ``from_row`` reads it back without validating again (the payload
was checked against the workflow's model when the options were written).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from .errors import InvalidSchedule, LockgateError
from .names import name_problem
from .schedule import Overlap, Schedule, ScheduleDef, ScheduleDefinitionError, build_schedule

__all__ = ["OPTION_NAMES", "RULE_OPTIONS", "IfExists", "build_runtime", "check_id", "from_row", "options_json"]

IfExists = Literal["error", "update", "skip"]

OPTION_NAMES = (
    "cron",
    "every",
    "timezone",
    "payload",
    "on_overlap",
    "buffer_limit",
    "backfill",
    "jitter",
    "max_runtime",
    "start_at",
    "end_at",
    "note",
)
"""The options ``create`` takes beside the id and the workflow (and ``update`` changes)."""

RULE_OPTIONS = frozenset({"cron", "every", "timezone", "jitter", "start_at", "end_at"})
"""Options that move the slots: changing one restarts the schedule's slots from the update."""

NOTE_LIMIT = 1000


def check_id(schedule_id: Any) -> str:
    """``schedule_id`` if it can name a schedule; ``InvalidSchedule`` (field ``id``) otherwise."""
    problem = name_problem(schedule_id)
    if problem is not None:
        raise InvalidSchedule(str(schedule_id), "id", problem)
    if len(schedule_id) > 200:
        raise InvalidSchedule(schedule_id[:40] + "...", "id", "must be at most 200 characters")
    return str(schedule_id)


def build_runtime(
    schedule_id: str, workflow: str, options: Mapping[str, Any], payload_model: type[BaseModel], now: float
) -> tuple[ScheduleDef, str | None]:
    """The validated schedule of ``options`` (``OPTION_NAMES``), and its note.

    ``InvalidSchedule`` names the first wrong field; its payload must suit ``payload_model``.
    """
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise InvalidSchedule(schedule_id, unknown[0], f"no such option (options: {', '.join(OPTION_NAMES)})")
    payload = options.get("payload")
    if callable(payload) and not isinstance(payload, BaseModel):
        raise InvalidSchedule(schedule_id, "payload", "a runtime schedule's payload is data (a dict), not a callback")
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    if payload is not None and not isinstance(payload, dict):
        raise InvalidSchedule(schedule_id, "payload", f"must be an object (a dict), got {type(payload).__name__}")
    note = options.get("note")
    if note is not None and (not isinstance(note, str) or len(note) > NOTE_LIMIT):
        raise InvalidSchedule(schedule_id, "note", f"must be text of at most {NOTE_LIMIT} characters")
    bounds = {name: _instant(schedule_id, name, options.get(name)) for name in ("start_at", "end_at")}
    start, end = bounds["start_at"], bounds["end_at"]
    if start is not None and end is not None and end <= start:
        raise InvalidSchedule(schedule_id, "end_at", "must be after start_at")
    given: dict[str, Any] = {k: options[k] for k in OPTION_NAMES if k in options and k not in _NOT_SCHEDULE}
    given["payload"] = payload
    if given.get("timezone") is None:
        given["timezone"] = "UTC"
    if given.get("on_overlap") is None:
        given["on_overlap"] = "skip"
    if "buffer_limit" in given and given["buffer_limit"] is None:
        given["buffer_limit"] = 1
    try:
        defn = build_schedule(schedule_id, workflow, Schedule(**given), payload_model, max(now, start or now))
    except ScheduleDefinitionError as exc:
        raise InvalidSchedule(schedule_id, exc.fields[0], exc.problem) from None
    except LockgateError as exc:
        raise InvalidSchedule(schedule_id, "schedule", exc.message) from None
    if start is not None or end is not None:
        defn = dataclasses.replace(defn, start_at=start, end_at=end)
    if end is not None and end <= now:
        raise InvalidSchedule(schedule_id, "end_at", "is in the past: the schedule would never fire")
    return defn, note


_NOT_SCHEDULE = frozenset({"start_at", "end_at", "note"})


def _instant(schedule_id: str, field: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidSchedule(schedule_id, field, "must be an aware datetime (with a time zone)")
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise InvalidSchedule(schedule_id, field, f"must be an aware datetime, got {type(value).__name__}")


def options_json(defn: ScheduleDef, note: str | None) -> str:
    """What a runtime schedule's row keeps of ``defn`` (the slot rule itself is also in its columns)."""
    data = {
        "cron": defn.cron,
        "every": defn.every,
        "payload": defn.payload,
        "on_overlap": defn.on_overlap,
        "buffer_limit": defn.buffer_limit,
        "backfill": defn.backfill,
        "jitter": defn.jitter,
        "max_runtime": defn.max_runtime,
        "start_at": defn.start_at,
        "end_at": defn.end_at,
        "note": note,
    }
    return json.dumps(data, separators=(",", ":"))


def stored_options(row: Mapping[str, Any]) -> dict[str, Any]:
    """A runtime row's options as ``build_runtime`` takes them (durations in seconds)."""
    data: dict[str, Any] = json.loads(row["definition"])
    data["timezone"] = row["timezone"]
    return {k: v for k, v in data.items() if v is not None or k in ("payload", "note")}


def from_row(row: Mapping[str, Any]) -> tuple[ScheduleDef, str | None]:
    """A runtime schedule's ``ScheduleDef`` and note, read back from its row."""
    data = json.loads(row["definition"])
    overlap: Overlap = data["on_overlap"]
    defn = ScheduleDef(
        name=row["name"],
        workflow=row["workflow"],
        cron=data["cron"],
        every=data["every"],
        zone=ZoneInfo(row["timezone"]),
        payload={} if data["payload"] is None else data["payload"],
        on_overlap=overlap,
        buffer_limit=int(data["buffer_limit"]),
        backfill=data["backfill"],
        max_runtime=float(data["max_runtime"]),
        jitter=float(data["jitter"]),
        start_at=data["start_at"],
        end_at=data["end_at"],
    )
    return defn, data.get("note")
