"""What the engine reports about runs, steps and events: plain, read-only records."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .callbacks import without_secret
from .clock import to_datetime
from .recording import TRUNCATED

__all__ = ["AttemptInfo", "EventInfo", "RunInfo", "StepInfo"]


def _plain(record: Any, skip: str = "") -> dict[str, Any]:
    """A record's fields as JSON-ready data (datetimes in ISO 8601), without ``skip``."""
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in record.__dict__.items() if k != skip}


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _input(text: str | None) -> tuple[Any, bool, int | None]:
    """A recorded step input: its value, whether only its head was kept, its size in bytes."""
    if text is None:
        return None, False, None
    try:
        value = json.loads(text)
    except ValueError:  # sealed and not opened: shown as stored
        return text, False, len(text.encode())
    if isinstance(value, dict) and value.get(TRUNCATED) is True:
        return value.get("head"), True, value.get("size")
    return value, False, len(text.encode())


def _shown(row: dict[str, Any]) -> Any:
    """An entry's output as shown: a callback token's secret (and its URL) never are."""
    output = _json(row["output"])
    return without_secret(output) if row["kind"] == "token" else output


def _child_output(outcome: Any) -> Any:
    """A child's outcome as its parent journaled it, with the child's output decoded too (it is
    kept as the child's JSON text: read as-is it would be a JSON string of JSON)."""
    if isinstance(outcome, dict) and isinstance(outcome.get("output"), str):
        try:
            return {**outcome, "output": json.loads(outcome["output"])}
        except ValueError:  # a sealed value, or text that is not JSON: shown as stored
            return outcome
    return outcome


def _event_waits(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The event waits a parked run's ``waiting_for`` holds (``ctx.wait_for_event``), if any."""
    text = row.get("waiting_for")
    if not text or row.get("status") != "running" or "events" not in text:
        return None
    try:
        found = json.loads(text).get("events")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, list) and found else None


def _version_wait(row: dict[str, Any]) -> dict[str, Any] | None:
    """What a run waiting for a version needs (``version``) and what the live workers offered (``offered``)."""
    text = row.get("waiting_for")
    if row.get("waiting_on") != "version" or not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return {"version": found.get("version"), "offered": found.get("offered", [])} if isinstance(found, dict) else None


@dataclass(frozen=True)
class RunInfo:
    """One run as stored."""

    id: str
    workflow: str
    status: str
    waiting_on: str | None
    payload: Any
    output: Any
    error_tag: str | None
    error_message: str | None
    idempotency_key: str | None
    version: str | None
    patches: list[str]
    parent_id: str | None
    parent_close: str | None
    retry_of: str | None
    ticket: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    wake_at: datetime | None
    owner: str | None
    entries: int
    reclaim_count: int
    discarded: bool
    source: str | None = None  # where the run came from (origin.py)
    trace_id: str | None = None
    waiting_match: list[dict[str, Any]] | None = None  # the events a parked run waits for, with their match
    waiting_version: dict[str, Any] | None = None  # waiting_on="version": the version it needs, what live workers offer
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RunInfo:
        return cls(
            id=row["id"],
            workflow=row["workflow"],
            status=row["status"],
            waiting_on=row["waiting_on"],
            payload=_json(row["payload"]),
            output=_json(row["output"]),
            error_tag=row["error_tag"],
            error_message=row["error_message"],
            idempotency_key=row["idempotency_key"],
            version=row["version"],
            patches=_json(row["patches"]) or [],
            parent_id=row["parent_id"],
            parent_close=row["parent_close"],
            retry_of=row["retry_of"],
            ticket=row["ticket"],
            created_at=_dt(row["created_at"]),
            updated_at=_dt(row["updated_at"]),
            finished_at=to_datetime(row["finished_at"]),
            wake_at=to_datetime(row["wake_at"]),
            owner=row["owner"],
            entries=int(row["entries"]),
            reclaim_count=int(row["reclaim_count"]),
            discarded=row["discarded_at"] is not None,
            source=row.get("source"),
            trace_id=row.get("trace_id"),
            waiting_match=_event_waits(row),
            waiting_version=_version_wait(row),
            raw=dict(row),
        )

    def to_dict(self) -> dict[str, Any]:
        return _plain(self, skip="raw")


def _dt(epoch: float) -> datetime:
    value = to_datetime(epoch)
    assert value is not None
    return value


@dataclass(frozen=True)
class StepInfo:
    """One journal entry: a step, timer, signal, update or child reached by the body."""

    key: str
    name: str
    kind: str
    status: str
    seq: int
    output: Any
    error_tag: str | None
    error_message: str | None
    attempts: int
    due_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    flow_wait: float | None = None  # seconds the step waited for its flow-control key before it started

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> StepInfo:
        return cls(
            key=row["step_key"],
            name=row["step_key"].rsplit("#", 1)[0],
            kind=row["kind"],
            status=row["status"],
            seq=int(row["seq"]),
            output=_child_output(_json(row["output"])) if row["kind"] == "wait_child" else _shown(row),
            error_tag=row["error_tag"],
            error_message=row["error_message"],
            attempts=int(row["attempts"]),
            due_at=to_datetime(row["due_at"]),
            started_at=to_datetime(row["started_at"]),
            finished_at=to_datetime(row["finished_at"]),
            flow_wait=None if row.get("flow_wait") is None else float(row["flow_wait"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass(frozen=True)
class AttemptInfo:
    """One attempt of a step (kept unless the engine records coarsely)."""

    step_key: str
    attempt: int
    status: str
    error_tag: str | None
    error_message: str | None
    started_at: datetime | None
    finished_at: datetime | None
    input: Any = None
    """The step's ``input=`` as recorded (JSON decoded); when truncated, the JSON text of its head."""
    input_truncated: bool = False
    input_size: int | None = None
    """Bytes of the whole input as JSON (``None`` when none was recorded)."""

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> AttemptInfo:
        value, truncated, size = _input(row.get("input"))
        return cls(
            step_key=row["step_key"],
            attempt=int(row["attempt"]),
            status=row["status"],
            error_tag=row["error_tag"],
            error_message=row["error_message"],
            started_at=to_datetime(row["started_at"]),
            finished_at=to_datetime(row["finished_at"]),
            input=value,
            input_truncated=truncated,
            input_size=size,
        )

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass(frozen=True)
class EventInfo:
    """One lifecycle event of a run."""

    id: int
    run_id: str
    type: str
    at: datetime
    data: Any

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> EventInfo:
        return cls(
            id=int(row["id"]), run_id=row["run_id"], type=row["type"], at=_dt(row["at"]), data=_json(row["data"])
        )

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)
