"""The flow controls a workflow declares; the gate enforces them before a run exists.

Every key, priority and ``fair_by`` callback receives the workflow's decoded payload
model (for ``batch``: the decoded item).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from .durations import Duration

__all__ = [
    "Batch",
    "Concurrency",
    "Debounce",
    "FailureReport",
    "RateLimit",
    "Singleton",
    "Throttle",
    "Timeouts",
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
    """At most ``limit`` admissions per sliding ``period`` per ``key``; the excess waits (queued)."""

    limit: int
    period: Duration
    key: KeyFn | None = None
    pool: str | None = None


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
