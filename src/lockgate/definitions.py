"""Workflow definitions (``WorkflowDef``) and the step retry policy (``Retry``).

A ``WorkflowDef`` is built once, when the ``App`` validates its declarations, and is
frozen from then on: its flow controls (``options``) and the gate's reading of them
(``gate``, a ``GatePlan``) are fields set at construction.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from .controls import WorkflowOptions
from .durations import Duration, to_seconds
from .plan import GatePlan

__all__ = ["Body", "Retry", "WorkflowDef", "as_tuple", "retry_hint"]

Strategy = Literal["exponential", "fixed", "linear"]
Retryable = tuple[type[BaseException], ...] | Callable[[BaseException], bool] | None


@dataclass(frozen=True)
class Retry:
    """How a step retries: how often, how spread out, for how long, and on which errors.

    ``max_attempts`` counts every attempt including the first. ``retryable`` is a tuple of
    exception classes or a predicate; anything else fails the step at once. ``max_delay``
    caps the growth of the delay (never below ``base_delay``). With
    ``respect_retry_after`` an error carrying ``retry_after`` (seconds) or
    ``retry_after_ms`` sets the next delay instead of the computed backoff.
    """

    max_attempts: int = 3
    strategy: Strategy = "exponential"
    base_delay: Duration = 0.5
    max_delay: Duration | None = 30.0
    factor: float = 2.0
    jitter: bool = True
    max_elapsed: Duration | None = None
    retryable: Retryable = None
    respect_retry_after: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"Retry.max_attempts must be an integer >= 1, got {self.max_attempts!r}")
        if self.strategy not in ("exponential", "fixed", "linear"):
            raise ValueError(f"Retry.strategy must be 'exponential', 'fixed' or 'linear', got {self.strategy!r}")
        if self.factor <= 0:
            raise ValueError(f"Retry.factor must be > 0, got {self.factor!r}")
        to_seconds(self.base_delay, what="Retry.base_delay")
        if self.max_delay is not None:
            to_seconds(self.max_delay, what="Retry.max_delay")
        if self.max_elapsed is not None:
            to_seconds(self.max_elapsed, what="Retry.max_elapsed")
        r = self.retryable
        if (
            r is not None
            and not callable(r)
            and not (isinstance(r, tuple) and all(isinstance(c, type) and issubclass(c, BaseException) for c in r))
        ):
            raise ValueError("Retry.retryable must be a tuple of exception classes or a predicate")

    def is_retryable(self, error: BaseException) -> bool:
        """Whether ``error`` may be retried at all under this policy."""
        r = self.retryable
        if r is None:
            return True
        if isinstance(r, tuple):
            return isinstance(error, r)
        return bool(r(error))

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based), before any hint."""
        base = to_seconds(self.base_delay)
        if self.strategy == "fixed":
            delay = base
        elif self.strategy == "linear":
            delay = base * attempt
        else:
            delay = base * (self.factor ** (attempt - 1))
        if self.max_delay is not None:
            delay = min(delay, max(base, to_seconds(self.max_delay)))  # caps growth, never the base delay
        if self.jitter:
            delay = (rng or random).uniform(0, delay)
        return delay

    def next_delay(self, attempt: int, error: BaseException, rng: random.Random | None = None) -> float:
        """The delay before the next attempt, honouring a provider's retry hint if asked to."""
        if self.respect_retry_after:
            hint = retry_hint(error)
            if hint is not None:
                return hint
        return self.backoff(attempt, rng)

    def after_failure(
        self, attempt: int, error: BaseException, rng: random.Random | None, spent: float
    ) -> float | None:
        """Seconds before the attempt after failed attempt ``attempt``, or ``None`` to give up (out of
        attempts, not retryable, or past ``max_elapsed`` once ``spent`` seconds and the delay are counted)."""
        if attempt >= self.max_attempts or not self.is_retryable(error):
            return None
        delay = self.next_delay(attempt, error, rng)
        if self.max_elapsed is not None and spent + delay > to_seconds(self.max_elapsed):
            return None
        return delay


def retry_hint(error: BaseException) -> float | None:
    """Seconds an error asks to wait (``retry_after`` in seconds or ``retry_after_ms``)."""
    value = getattr(error, "retry_after", None)
    if value is not None:
        try:
            return max(0.0, to_seconds(value))
        except (ValueError, TypeError):
            return None
    millis = getattr(error, "retry_after_ms", None)
    if isinstance(millis, int | float):
        return max(0.0, millis / 1000)
    return None


Body = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, kw_only=True)
class WorkflowDef:
    """A validated workflow: what the engine and the gate read at run time.

    ``options`` are the flow controls as declared; ``gate`` is their resolved plan, built
    with the definition (``App.validate``).
    """

    name: str
    fn: Body
    payload_model: type[BaseModel]
    result_type: Any
    gate: GatePlan
    options: WorkflowOptions = field(default_factory=WorkflowOptions)
    idempotency_key: Callable[[Any], str] | None = None
    version: str | None = None
    compatible_with: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()
    suspend_on_failure: bool = False
    encrypt_steps: bool = False
    stall_after: float | None = None
    on_stalled: Callable[[Any], Any] | None = None
    signals: dict[str, type[BaseModel]] = field(default_factory=dict)
    updates: dict[str, type[BaseModel]] = field(default_factory=dict)
    cancel_on: tuple[Any, ...] = ()  # events.CancelOn entries (checked by events.validate_events)
    queue: str | None = None  # the durable queue it belongs to (queues.py): its controls are the queue's
    gate_as_child: bool = True  # ctx.start_child offers it to its gate unless told otherwise (gate=False)
    runs_on: Mapping[str, str] = field(default_factory=dict)  # the labels a worker needs to take its runs (routing.py)

    @functools.cached_property
    def patches_json(self) -> str:
        """``patches`` as the JSON every new run is stamped with."""
        return json.dumps(list(self.patches))

    def accepts_version(self, version: str | None) -> bool:
        """Whether a run stamped with ``version`` may resume under this definition."""
        if version == self.version:
            return True
        return version is not None and version in self.compatible_with


def as_tuple(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A string, a sequence of strings or ``None``, as a tuple of strings."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)
