"""The flow controls a workflow declares; the gate enforces them before a run exists.

Every key, priority and ``fair_by`` callback receives the workflow's decoded payload
model (for ``batch``: the decoded item).

``WorkflowOptions`` is the typed set of controls one workflow declares, and
``read_options`` checks the decorator's keyword arguments into one: that each is a known
option of the right kind. What the values mean together is checked when they are planned
(``lockgate.plan``).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from .durations import Duration
from .errors import DefinitionError
from .flowcontrol import FlowControl, check_flow_control

__all__ = [
    "Batch",
    "Concurrency",
    "Debounce",
    "FailureReport",
    "KeyFn",
    "RateLimit",
    "Singleton",
    "Throttle",
    "Timeouts",
    "WorkflowOptions",
    "callable_or_none",
    "read_options",
]

KeyFn = Callable[[Any], Any]


@dataclass(frozen=True)
class Debounce:
    """Fold arrivals sharing ``key`` into one pending start, due ``period`` after the last.

    ``timeout`` caps the wait from the first arrival; ``keep`` chooses the payload the run
    gets: the ``"last"`` (default), the ``"first"``, or ``"all"`` of them as ``items``.
    """

    period: Duration
    key: KeyFn | None = None
    timeout: Duration | None = None
    keep: Literal["last", "first", "all"] = "last"


@dataclass(frozen=True)
class Singleton:
    """At most one live run per ``key``: ``"skip"`` the newcomer, or ``"cancel"`` the incumbent."""

    mode: Literal["skip", "cancel"] | None = None
    key: KeyFn | None = None


@dataclass(frozen=True)
class Concurrency:
    """At most ``limit`` admitted, unfinished runs per ``key``.

    ``pool`` shares one budget across workflows (members must declare the same limit);
    ``total`` caps every key together; ``burst`` lets a key borrow idle room up to that
    ceiling while ``total`` is not reached.
    """

    limit: int
    key: KeyFn | None = None
    pool: str | None = None
    total: int | None = None
    burst: int | None = None


@dataclass(frozen=True)
class Throttle:
    """At most ``limit`` admissions per sliding ``period`` per ``key``; the excess waits (queued).

    With ``burst`` the window becomes a token bucket (GCRA): starts are spaced ``period / limit``
    apart, and a key that has been idle lets up to ``burst`` more through at once; never more
    than ``limit + burst`` in any ``period``, ``limit`` per ``period`` in the long run.
    """

    limit: int
    period: Duration
    key: KeyFn | None = None
    pool: str | None = None
    burst: int | None = None


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` admissions per sliding ``period`` per ``key``; the excess is dropped."""

    limit: int
    period: Duration
    key: KeyFn | None = None
    pool: str | None = None


@dataclass(frozen=True)
class Batch:
    """Gather single ``item`` arrivals into one run whose payload has ``items: list[item]``.

    A batch flushes at ``max_size`` items or ``timeout`` after its first item (a deadline,
    not a quiet period).
    """

    item: type[BaseModel]
    max_size: int
    timeout: Duration
    key: KeyFn | None = None


@dataclass(frozen=True)
class Timeouts:
    """``start``: how long a start may stay parked (from its first arrival); ``finish``: how long a run may run."""

    start: Duration | None = None
    finish: Duration | None = None


class FailureReport(BaseModel):
    """The payload of an ``on_failure`` workflow: what failed to deliver, and why."""

    workflow: str
    payload: Any = None
    error_tag: str | None = None
    error_message: str | None = None
    run_id: str | None = None
    reason: Literal["failed", "finish-timeout", "start-timeout", "unregistered", "cancel-on"]
    failed_at: datetime


@dataclass(frozen=True)
class WorkflowOptions:
    """The controls one workflow declares, as given (``throttle`` and ``rate_limit`` as tuples).

    ``priority`` and ``fair_by`` take the payload model; ``on_failure`` names the workflow
    that receives a ``FailureReport`` when a start or a run of this one fails to deliver.
    """

    debounce: Debounce | None = None
    singleton: Singleton | None = None
    concurrency: Concurrency | None = None
    throttle: tuple[Throttle, ...] = ()
    rate_limit: tuple[RateLimit, ...] = ()
    batch: Batch | None = None
    timeouts: Timeouts | None = None
    priority: KeyFn | None = None
    fair_by: KeyFn | None = None
    on_failure: str | None = None
    flow_control: FlowControl | None = None  # the step flow control of every run that gives none at start


# The options read into a control object, in the order they are checked.
_CONTROLS: dict[str, type] = {
    "debounce": Debounce,
    "singleton": Singleton,
    "concurrency": Concurrency,
    "throttle": Throttle,
    "rate_limit": RateLimit,
    "batch": Batch,
    "timeouts": Timeouts,
}
_CALLABLES = ("priority", "fair_by")
_KNOWN = frozenset({*_CONTROLS, *_CALLABLES, "on_failure", "flow_control"})
_WINDOWS = ("throttle", "rate_limit")  # one control or a non-empty list of them


def callable_or_none(workflow: str, field: str, fn: Any) -> KeyFn | None:
    """``fn`` if it is a callable or ``None``; anything else is a ``DefinitionError`` naming ``field``."""
    if fn is not None and not callable(fn):
        raise DefinitionError(workflow, field, "must be a callable taking the payload model")
    return typing.cast(KeyFn | None, fn)


def read_options(workflow: str, declared: Mapping[str, Any]) -> WorkflowOptions:
    """The controls in ``declared`` (the decorator's flow-control keywords) as ``WorkflowOptions``.

    Refuses an unknown option or one of the wrong kind with a ``DefinitionError``.
    """
    for option in declared:
        if option not in _KNOWN:
            raise DefinitionError(workflow, option, f"unknown workflow option (known: {', '.join(sorted(_KNOWN))})")
    for option, kind in _CONTROLS.items():
        value = declared.get(option)
        if option in _WINDOWS and isinstance(value, list | tuple):
            if not value or not all(isinstance(v, kind) for v in value):
                raise DefinitionError(workflow, option, f"must be lg.{kind.__name__} or a non-empty list of them")
        elif value is not None and not isinstance(value, kind):
            raise DefinitionError(workflow, option, f"must be lg.{kind.__name__}, got {type(value).__name__}")
    callbacks = {option: callable_or_none(workflow, option, declared.get(option)) for option in _CALLABLES}
    on_failure = declared.get("on_failure")
    if on_failure is not None and (not isinstance(on_failure, str) or not on_failure):
        raise DefinitionError(workflow, "on_failure", "must be the name of a registered workflow")
    flow_control = declared.get("flow_control")
    if flow_control is not None:
        try:
            check_flow_control(flow_control)
        except ValueError as exc:
            field, _, problem = str(exc).partition(": ")
            raise DefinitionError(workflow, field, problem) from None
    return WorkflowOptions(
        debounce=declared.get("debounce"),
        singleton=declared.get("singleton"),
        concurrency=declared.get("concurrency"),
        throttle=_windows(declared.get("throttle")),
        rate_limit=_windows(declared.get("rate_limit")),
        batch=declared.get("batch"),
        timeouts=declared.get("timeouts"),
        priority=callbacks["priority"],
        fair_by=callbacks["fair_by"],
        on_failure=on_failure,
        flow_control=flow_control,
    )


def _windows(value: Any) -> tuple[Any, ...]:
    """One window control, a list of them, or none, as a tuple."""
    if value is None:
        return ()
    return tuple(value) if isinstance(value, list | tuple) else (value,)
