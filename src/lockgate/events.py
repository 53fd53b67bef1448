"""Domain events: declarations, triggers, ``CancelOn`` and the envelope callbacks receive.

Plain data built by ``app.event`` / ``app.trigger`` / ``lg.CancelOn`` and checked once at
boot (``validate_events``). Triggers and ``cancel_on`` hold the event *descriptor*, not its
name, so renaming an event moves its consumers with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from .crypto import Keyring, Undecryptable, event_identity, is_sealed, payload_identity
from .definitions import WorkflowDef
from .durations import Duration, to_seconds
from .errors import DefinitionError, PayloadError
from .matching import Match, check_match
from .names import name_problem
from .origin import Subject
from .serde import validate_payload

__all__ = [
    "WILDCARD",
    "CancelOn",
    "DeliveryRecord",
    "Event",
    "EventDef",
    "EventRecord",
    "Subject",
    "TriggerDef",
    "decode_event",
    "payload_for_match",
    "validate_events",
]

WILDCARD = "*"
"""``app.trigger(on="*")``: a trigger that sees every published event, besides the exact ones."""


@dataclass(frozen=True, eq=False)
class EventDef:
    """A declared domain event (``app.event(name, key=Model, payload=Model)``); pass it to ``publish``."""

    name: str
    key: type[BaseModel] | None = None
    payload: type[BaseModel] | None = None

    def validate(self, key: Any, payload: Any) -> tuple[str, str]:
        """``(key_json, data_json)`` for a publish; ``PayloadError`` naming every bad field otherwise."""
        errors: list[dict[str, Any]] = []
        texts = []
        for part, model, value in (("key", self.key, key), ("payload", self.payload, payload)):
            try:
                texts.append(_as_json(model, value, f"{part} of event {self.name!r}"))
            except PayloadError as exc:
                errors += [{**e, "loc": (part, *tuple(e.get("loc") or ()))} for e in exc.errors]
        if errors:
            raise PayloadError(f"event {self.name!r}", errors)
        return texts[0], texts[1]

    def __repr__(self) -> str:
        return f"EventDef({self.name!r})"


def _as_json(model: type[BaseModel] | None, value: Any, what: str) -> str:
    if model is not None:
        return validate_payload(model, value, what=what).model_dump_json()
    if value is None:
        return "{}"
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise PayloadError(what, f"not JSON-serialisable: {exc}") from None


@dataclass(frozen=True)
class Event:
    """The envelope a trigger's ``filter`` / ``payload`` / ``idempotency_key`` and ``CancelOn.match`` receive.

    ``key`` and ``data`` are decoded with the declaration's models (plain JSON without one).
    """

    id: str
    name: str
    key: Any
    data: Any
    occurred_at: datetime
    source: str
    trace_id: str | None = None
    subject: Subject | None = None


def decode_event(
    declared: EventDef | None, row: Mapping[str, Any], occurred_at: datetime, keyring: Keyring | None = None
) -> Event:
    """The envelope of the stored event ``row``; ``ValueError`` when it does not decode against ``declared``.

    Data an encrypted run published is opened with ``keyring``; data no key opens does not decode.
    """
    if declared is None:
        raise ValueError(f"event {row['name']!r} is not declared in this app")
    text = row["data"]
    try:
        if is_sealed(text):
            if keyring is None:
                raise ValueError("its data is encrypted and no key was given")
            text = keyring.open(text, event_identity(row["id"]))
        key = json.loads(row["key"]) if declared.key is None else declared.key.model_validate_json(row["key"])
        data = json.loads(text) if declared.payload is None else declared.payload.model_validate_json(text)
    except Undecryptable:
        raise ValueError(f"event {row['name']!r} ({row['id']}) does not decode: no key opens its data") from None
    except (ValidationError, ValueError) as exc:
        raise ValueError(f"event {row['name']!r} ({row['id']}) does not decode: {exc}") from None
    return Event(
        id=row["id"],
        name=row["name"],
        key=key,
        data=data,
        occurred_at=occurred_at,
        source=row["source"],
        trace_id=row.get("trace_id"),
        subject=Subject.from_json(row.get("subject")),
    )


def payload_for_match(defn: WorkflowDef, payload_json: str, keyring: Keyring | None) -> Any:
    """A run's (or parked start's) payload as a ``cancel_on`` match sees it: its model, opened with ``keyring``.

    ``None`` when it does not validate (a batch's own payload, a model that changed); ``Undecryptable``
    when no key opens it.
    """
    model = defn.gate.item_model if defn.gate is not None and defn.gate.item_model is not None else defn.payload_model
    if is_sealed(payload_json):  # an encrypted workflow's payload: match sees it opened, or never matches
        payload_json = (keyring or Keyring()).open(payload_json, payload_identity(defn.name))
    try:
        return model.model_validate_json(payload_json)
    except ValueError:
        return None


EventFn = Callable[[Event], Any]


@dataclass(frozen=True, eq=False)
class TriggerDef:
    """``app.trigger(on=event, workflow=...)``: start ``workflow`` for each matching event.

    ``filter(ev) -> bool`` skips an event (recorded ``skipped``/``filtered``); ``payload(ev)``
    maps it to the workflow's payload (default: ``ev.data``); ``idempotency_key(ev)``
    deduplicates deliveries (default ``<event id>:<trigger name>``).
    """

    name: str
    on: EventDef | str
    workflow: str | Callable[..., Any]
    filter: EventFn | None = None
    payload: EventFn | None = None
    idempotency_key: EventFn | None = None

    @property
    def event_name(self) -> str:
        return self.on if isinstance(self.on, str) else self.on.name

    @property
    def workflow_name(self) -> str:
        wf = self.workflow
        return wf if isinstance(wf, str) else str(getattr(wf, "__lockgate_workflow__", getattr(wf, "__qualname__", wf)))


@dataclass(frozen=True, eq=False)
class CancelOn:
    """Cancel live runs and parked starts of the declaring workflow when ``event`` correlates.

    ``match(ev, payload) -> bool`` or a dict of equalities on the event's data is required
    (``lambda ev, p: True`` means every live run); it is matched by the rule ``ctx.wait_for_event`` uses;
    ``within`` only cancels runs started that long before the event; ``reason`` defaults to
    ``cancel-on:<event>``.
    """

    event: EventDef
    match: Callable[[Event, Any], bool] | Match = None
    within: Duration | None = None
    reason: str | None = None

    @property
    def within_seconds(self) -> float | None:
        return None if self.within is None else to_seconds(self.within, what="CancelOn.within")

    @property
    def reason_text(self) -> str:
        return self.reason or f"cancel-on:{self.event.name}"


def validate_events(
    events: list[EventDef], triggers: list[TriggerDef], defs: Mapping[str, WorkflowDef]
) -> dict[str, EventDef]:
    """Check the app's events, triggers and ``cancel_on`` entries; the events by name.

    Each problem is a ``DefinitionError`` naming both sides (the consumer and the event).
    """
    by_name: dict[str, EventDef] = {}
    for ev in events:
        if ev.name == WILDCARD or not ev.name:
            raise DefinitionError(f"event {ev.name!r}", "name", "an event needs a name other than '*'")
        problem = name_problem(ev.name)
        if problem is not None:
            raise DefinitionError(f"event {ev.name!r}", "name", problem)
        if ev.name in by_name:
            raise DefinitionError(f"event {ev.name!r}", "name", "two events are declared with this name")
        by_name[ev.name] = ev
    seen: set[str] = set()
    for tr in triggers:
        where = f"trigger {tr.name!r}"
        if tr.name in seen:
            raise DefinitionError(where, "name", "two triggers are declared with this name")
        seen.add(tr.name)
        if isinstance(tr.on, EventDef):
            if by_name.get(tr.on.name) is not tr.on:
                raise DefinitionError(where, ["on", f"event {tr.on.name!r}"], "the event is not declared in this app")
        elif tr.on != WILDCARD:
            raise DefinitionError(where, "on", f"must be an event descriptor (app.event) or '*', got {tr.on!r}")
        if tr.workflow_name not in defs:
            raise DefinitionError(where, ["workflow", f"workflow {tr.workflow_name!r}"], "no such workflow")
        for option in ("filter", "payload", "idempotency_key"):
            fn = getattr(tr, option)
            if fn is not None and not callable(fn):
                raise DefinitionError(where, option, "must be callable, taking the event envelope")
    for defn in defs.values():
        for i, co in enumerate(defn.cancel_on):
            option = f"cancel_on[{i}]"
            if not isinstance(co, CancelOn):
                raise DefinitionError(defn.name, option, "must be lg.CancelOn(event=, match=)")
            if by_name.get(co.event.name) is not co.event:
                raise DefinitionError(
                    defn.name, [option, f"event {co.event.name!r}"], "the event is not declared in this app"
                )
            if co.match is None or not (callable(co.match) or isinstance(co.match, Mapping)):
                raise DefinitionError(
                    defn.name,
                    [f"{option}.match", f"event {co.event.name!r}"],
                    "match is required: (ev, payload) -> bool, or a dict of field path -> value",
                )
            try:
                check_match(co.match, [(co.event.name, co.event.payload)], f"{option}.match")
            except ValueError as exc:
                raise DefinitionError(defn.name, f"{option}.match", str(exc)) from None
            try:
                within = co.within_seconds
            except ValueError as exc:
                raise DefinitionError(defn.name, f"{option}.within", str(exc)) from None
            if within is not None and within <= 0:
                raise DefinitionError(defn.name, f"{option}.within", "must be positive")
    return by_name


@dataclass(frozen=True)
class EventRecord:
    """One stored event, as ``engine.list_events`` reports it."""

    id: str
    name: str
    key: Any
    data: Any
    occurred_at: datetime
    source: str
    trace_id: str | None
    subject: dict[str, Any] | None
    problem: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> EventRecord:
        return cls(
            id=row["id"],
            name=row["name"],
            key=json.loads(row["key"]),
            data=json.loads(row["data"]),
            occurred_at=datetime.fromtimestamp(float(row["occurred_at"]), UTC),
            source=row["source"],
            trace_id=row["trace_id"],
            subject=None if row["subject"] is None else json.loads(row["subject"]),
            problem=row["problem"],
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class DeliveryRecord:
    """What became of one event for one trigger: ``pending``, ``started``, ``skipped`` or ``failed``."""

    id: str
    event_id: str
    trigger: str
    workflow: str
    status: str
    reason: str | None
    idempotency_key: str | None
    outcome: str | None
    run_id: str | None
    ticket: str | None
    created_at: datetime
    delivered_at: datetime | None
    replay: int = 0  # 0: the delivery made at publish; n: the nth replay (lockgate events replay)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DeliveryRecord:
        delivered = row["delivered_at"]
        return cls(
            id=row["id"],
            event_id=row["event_id"],
            trigger=row["trigger_name"],
            workflow=row["workflow"],
            status=row["status"],
            reason=row["reason"],
            idempotency_key=row["idempotency_key"],
            outcome=row["outcome"],
            run_id=row["run_id"],
            ticket=row["ticket"],
            created_at=datetime.fromtimestamp(float(row["created_at"]), UTC),
            delivered_at=None if delivered is None else datetime.fromtimestamp(float(delivered), UTC),
            replay=int(row.get("replay") or 0),
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in self.__dict__.items()}
