"""Step flow control: ``FlowControl`` as declared, and ``FlowLimits`` as resolved for one run.

A ``FlowControl`` bounds the *steps* that run under its key, across every run and every
process: ``rate`` of them may start per sliding ``period`` and at most ``parallelism`` may
run at once. It is given at start (every step of that run), on a workflow (the default for
its runs) or on one ``ctx.step`` (that step only, replacing the run's). Its key may be a
callable of the run's decoded payload; ``resolve`` turns it into ``FlowLimits``, plain
data a run row stores as JSON.

With a ``cost`` the key is *weighted*: its ``rate`` counts units (tokens, say) rather than
calls. Each call reserves its cost when it is admitted and may settle the units it really used
afterwards (``ctx.settle`` or ``settle=``); see docs/step-flow-control.md, "Counting tokens, not
calls".
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .durations import Duration, to_seconds
from .errors import DefinitionError
from .names import name_problem

__all__ = [
    "INHERIT",
    "FlowControl",
    "FlowLimits",
    "check_burst",
    "check_cost",
    "check_flow_control",
    "check_flow_keys",
    "check_limits",
    "check_settled",
    "check_storable",
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

    With ``cost`` (an int, or a callable of the step's arguments giving one) the ``rate`` counts
    units: a call is admitted only when the units counted in the trailing ``period`` plus its
    own reservation fit the rate. ``settle``: a callable of the step's result giving the units
    the call really used, which replace its reservation in the window.
    """

    key: str | Callable[[Any], Any]
    rate: int | None = None
    period: Duration = "1s"
    parallelism: int | None = None
    burst: int | None = None
    cost: int | Callable[..., Any] | None = None
    settle: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class FlowLimits:
    """A flow control with its key resolved and its period in seconds (what is stored and enforced)."""

    key: str
    rate: int | None
    period: float
    parallelism: int | None
    burst: int | None = None
    weighted: bool = False  # the rate counts units (``FlowControl.cost``), not calls
    cost: int | None = None  # a weighted key's cost per call, when it is one int (not a callable)

    def to_json(self) -> str:
        data = self._declared()
        if self.cost is not None:
            data["cost"] = self.cost
        return json.dumps(data)

    def declaration(self) -> str:
        """The key's limits as a declaration writes them (a call's cost is no limit of the key)."""
        return json.dumps(self._declared())

    def _declared(self) -> dict[str, Any]:
        data: dict[str, Any] = {"key": self.key, "rate": self.rate, "period": self.period}
        data["parallelism"] = self.parallelism
        if self.burst is not None:  # absent otherwise: a declaration without one reads as it always did
            data["burst"] = self.burst
        if self.weighted:
            data["weighted"] = True
        return data

    @classmethod
    def from_json(cls, text: str) -> FlowLimits:
        data = json.loads(text)
        limits = (data["rate"], float(data["period"]), data["parallelism"], data.get("burst"))
        return cls(str(data["key"]), *limits, bool(data.get("weighted")), data.get("cost"))

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
            bool(row.get("weighted")),
        )

    def as_control(self, cost: int | None = None) -> FlowControl:
        """The limits as a ``FlowControl`` (what ``ctx.flow_control`` returns), with a weighted call's ``cost``."""
        return FlowControl(self.key, self.rate, self.period, self.parallelism, self.burst, cost)


MAX_COUNT = 2**53 - 1
"""The largest rate, parallelism, burst, cost or settled count a key takes (exact as a float and in JSON)."""


def _at_most(field: str, value: int) -> int:
    if value > MAX_COUNT:
        raise ValueError(f"{field}: must be at most {MAX_COUNT:,} (2**53 - 1), got {value!r}")
    return value


def _count(field: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: must be a positive int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{field}: must be positive, got {value!r}")
    return _at_most(field, value)


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
    return _at_most("burst", burst)


def check_cost(value: Any, field: str = "cost") -> int:
    """A call's cost in units: a positive int; ``ValueError`` naming ``field`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: must be a positive int of units, got {value!r}")
    if value <= 0:
        raise ValueError(f"{field}: must be positive, got {value!r}")
    return _at_most(field, value)


def check_settled(value: Any, field: str = "settle") -> int:
    """The units a call really used: a non-negative int; ``ValueError`` naming ``field`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: must be a non-negative int of units, got {value!r}")
    if value < 0:
        raise ValueError(f"{field}: must be non-negative, got {value!r}")
    return _at_most(field, value)


def _check_weights(fc: FlowControl) -> None:
    if fc.cost is not None:
        if not callable(fc.cost):
            check_cost(fc.cost)
        if fc.rate is None:
            raise ValueError("cost: counts units against a rate: give rate too")
        if fc.burst is not None:
            raise ValueError("cost: a weighted key takes no burst (its window counts units; drop one of the two)")
        if not callable(fc.cost) and fc.cost > fc.rate:
            raise ValueError(f"cost: {fc.cost} units could never fit the rate of {fc.rate}")
    if fc.settle is not None:
        if not callable(fc.settle):
            raise ValueError(f"settle: must be a callable of the step's result, got {fc.settle!r}")
        if fc.cost is None:
            raise ValueError("settle: settles a reservation: give cost too")


def check_storable(fc: FlowControl) -> None:
    """``fc`` as a start stores it with its run: no callable of a step (``ValueError`` otherwise)."""
    for field in ("cost", "settle"):
        if callable(getattr(fc, field)):
            raise ValueError(
                f"flow_control.{field}: a callable cannot be stored with a start; declare it on the workflow or give "
                f"ctx.step({field}=...)"
            )


def check_flow_control(value: Any) -> FlowControl:
    """``value`` as a valid ``FlowControl``; ``ValueError`` names the bad field (the caller types it)."""
    if not isinstance(value, FlowControl):
        raise ValueError(f"flow_control: must be lg.FlowControl, got {type(value).__name__}")
    key = value.key
    if not callable(key) and (not isinstance(key, str) or not key.strip()):
        raise ValueError(f"flow_control.key: must be a non-empty string or a callable of the payload, got {key!r}")
    problem = None if callable(key) else name_problem(key)
    if problem is not None:
        raise ValueError(f"flow_control.key: {problem}")
    try:
        check_limits(value.rate, value.period, value.parallelism)
        check_burst(value.burst, value.rate)
        _check_weights(value)
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
        problem = name_problem(str(key))
        if problem is not None:
            raise ValueError(f"flow_control.key: callback returned a key that cannot be one: {problem}")
    rate, period, parallelism = check_limits(fc.rate, fc.period, fc.parallelism)
    cost = fc.cost if isinstance(fc.cost, int) else None
    return FlowLimits(str(key), rate, period, parallelism, check_burst(fc.burst, rate), fc.cost is not None, cost)


def check_flow_keys(declared: dict[str, FlowControl | None]) -> None:
    """Workflows that declare one flow-control key declare the same limits for it (the key has one set
    of limits, across every run and process); ``DefinitionError`` naming both workflows otherwise.

    ``declared`` maps each workflow to its ``flow_control`` option (checked); keys computed from the
    payload are not known before a start and are not compared.
    """
    seen: dict[str, tuple[str, _Limits]] = {}
    for workflow, fc in declared.items():
        if fc is None or not isinstance(fc.key, str):
            continue
        limits = (*check_limits(fc.rate, fc.period, fc.parallelism), fc.burst, fc.cost is not None)
        first = seen.setdefault(fc.key, (workflow, limits))
        if first[1] != limits:
            raise DefinitionError(
                workflow,
                ["flow_control", f"{first[0]}.flow_control"],
                f"workflows sharing the flow-control key {fc.key!r} must declare the same limits "
                f"({_shown(limits)} vs {_shown(first[1])} in {first[0]!r})",
            )


_Limits = tuple[int | None, float, int | None, int | None, bool]  # rate, period, parallelism, burst, weighted


def _shown(limits: _Limits) -> str:
    rate, period, parallelism, burst, weighted = limits
    parts = [] if rate is None else [f"rate={rate}{' units' if weighted else ''} per {period:g}s"]
    parts += [] if parallelism is None else [f"parallelism={parallelism}"]
    return ", ".join([*parts, *([] if burst is None else [f"burst={burst}"])])
