"""Step flow control: ``FlowControl`` as declared, and ``FlowLimits`` as resolved for one run.

A ``FlowControl`` bounds the *steps* that run under its key, across every run and every
process: ``rate`` of them may start per sliding ``period`` and at most ``parallelism`` may
run at once. It is given at start (every step of that run), on a workflow (the default for
its runs) or on one ``ctx.step`` (that step only, replacing the run's). Its key may be a
callable of the run's decoded payload; ``resolve`` turns it into ``FlowLimits``, plain
data a run row stores as JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .durations import Duration, to_seconds

__all__ = [
    "INHERIT",
    "FlowControl",
    "FlowLimits",
    "check_burst",
    "check_flow_control",
    "check_limits",
    "resolve_flow",
]


class _Inherit:
    """The default of ``ctx.step(flow_control=)``: the run's configuration applies."""

    _instance: _Inherit | None = None

    def __new__(cls) -> _Inherit:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "INHERIT"


INHERIT: Any = _Inherit()
"""``ctx.step(..., flow_control=INHERIT)`` (the default): the run's flow control applies to the step."""


@dataclass(frozen=True)
class FlowControl:
    """At most ``rate`` steps start per sliding ``period`` and ``parallelism`` run at once, per ``key``.

    ``key`` is a string or a callable of the run's decoded payload; at least one of
    ``rate`` and ``parallelism`` is given. A step over the key's limits waits durably
    (its run parks; no worker is held) and starts when a slot frees or the window opens.
    With ``burst`` (and a ``rate``) the window is a token bucket: starts are spaced
    ``period / rate`` apart and an idle key lets ``burst`` more start at once.
    """

    key: str | Callable[[Any], Any]
    rate: int | None = None
    period: Duration = "1s"
    parallelism: int | None = None
    burst: int | None = None


@dataclass(frozen=True)
class FlowLimits:
    """A flow control with its key resolved and its period in seconds (what is stored and enforced)."""

    key: str
    rate: int | None
    period: float
    parallelism: int | None
    burst: int | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {"key": self.key, "rate": self.rate, "period": self.period}
        data["parallelism"] = self.parallelism
        if self.burst is not None:  # absent otherwise: a declaration without one reads as it always did
            data["burst"] = self.burst
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> FlowLimits:
        data = json.loads(text)
        return cls(str(data["key"]), data["rate"], float(data["period"]), data["parallelism"], data.get("burst"))

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> FlowLimits:
        """From a ``lockgate_flow_keys`` row (``key, rate, period, parallelism``, and ``burst`` if read)."""
        rate, par, burst = row.get("rate"), row.get("parallelism"), row.get("burst")
        return cls(
            str(row["key"]),
            None if rate is None else int(rate),
            float(row["period"]),
            None if par is None else int(par),
            None if burst is None else int(burst),
        )

    def as_control(self) -> FlowControl:
        """The limits as a ``FlowControl`` (what ``ctx.flow_control`` returns)."""
        return FlowControl(self.key, self.rate, self.period, self.parallelism, self.burst)


def _count(field: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: must be a positive int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{field}: must be positive, got {value!r}")
    return value


def check_limits(rate: Any, period: Any, parallelism: Any) -> tuple[int | None, float, int | None]:
    """``(rate, period seconds, parallelism)`` checked; ``ValueError`` naming the bad field."""
    checked_rate = _count("rate", rate)
    checked_par = _count("parallelism", parallelism)
    try:
        seconds = to_seconds(period, what="period")
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if seconds <= 0 or not math.isfinite(seconds):
        raise ValueError(f"period: must be positive, got {period!r}")
    if checked_rate is None and checked_par is None:
        raise ValueError("rate, parallelism: give at least one")
    return checked_rate, seconds, checked_par


def check_burst(burst: Any, rate: int | None) -> int | None:
    """A flow control's ``burst`` checked: absent, or a non-negative int beside a ``rate``."""
    if burst is None:
        return None
    if isinstance(burst, bool) or not isinstance(burst, int):
        raise ValueError(f"burst: must be a non-negative int, got {burst!r}")
    if burst < 0:
        raise ValueError(f"burst: must be non-negative, got {burst!r}")
    if rate is None:
        raise ValueError("burst: lets starts through beyond a rate: give rate too")
    return burst


def check_flow_control(value: Any) -> FlowControl:
    """``value`` as a valid ``FlowControl``; ``ValueError`` names the bad field (the caller types it)."""
    if not isinstance(value, FlowControl):
        raise ValueError(f"flow_control: must be lg.FlowControl, got {type(value).__name__}")
    key = value.key
    if not callable(key) and (not isinstance(key, str) or not key.strip()):
        raise ValueError(f"flow_control.key: must be a non-empty string or a callable of the payload, got {key!r}")
    try:
        check_limits(value.rate, value.period, value.parallelism)
        check_burst(value.burst, value.rate)
    except ValueError as exc:
        raise ValueError(f"flow_control.{exc}") from None
    return value


def resolve_flow(fc: FlowControl, payload: Any) -> FlowLimits:
    """``fc`` for a run whose decoded payload is ``payload``; ``ValueError`` if its key callback fails."""
    key: Any = fc.key
    if callable(key):
        try:
            key = key(payload)
        except Exception as exc:
            raise ValueError(f"flow_control.key: callback raised {type(exc).__name__}: {exc}") from None
        if key is None or (isinstance(key, str) and not key.strip()):
            raise ValueError(f"flow_control.key: callback returned {key!r}, not a non-empty key")
    rate, period, parallelism = check_limits(fc.rate, fc.period, fc.parallelism)
    return FlowLimits(str(key), rate, period, parallelism, check_burst(fc.burst, rate))
