"""The gate's reading of each workflow's controls, validated once at boot.

``plan_for`` turns the options of one workflow into a ``GatePlan`` (durations parsed,
pools resolved); ``validate_gate`` refuses what cannot work, naming the workflow and
the fields, before any start is accepted.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from ..controls import Batch, Concurrency, Debounce, FailureReport, RateLimit, Singleton, Throttle, Timeouts
from ..definitions import WorkflowDef
from ..durations import to_seconds
from ..errors import DefinitionError

__all__ = ["GatePlan", "Window", "plan_for", "validate_gate"]

OPTIONS = {
    "debounce": Debounce,
    "singleton": Singleton,
    "concurrency": Concurrency,
    "throttle": Throttle,
    "rate_limit": RateLimit,
    "batch": Batch,
    "timeouts": Timeouts,
}
CALLABLES = ("priority", "fair_by")
KNOWN = frozenset({*OPTIONS, *CALLABLES, "on_failure"})


@dataclass(frozen=True)
class Window:
    """One sliding window (of a throttle or a rate limit), resolved."""

    kind: Literal["throttle", "rate_limit"]
    index: int
    limit: int
    period: float
    key: Callable[[Any], Any] | None
    scope: str  # the pool name, or the workflow's own

    @property
    def name(self) -> str:
        return f"{self.kind}[{self.index}]"


@dataclass(frozen=True)
class GatePlan:
    """Everything the gate needs to decide a start of one workflow."""

    workflow: str
    debounce: Debounce | None = None
    debounce_period: float = 0.0
    debounce_timeout: float | None = None
    batch: Batch | None = None
    batch_timeout: float = 0.0
    item_model: type[BaseModel] | None = None  # what an arrival is validated against (batch, keep="all")
    singleton: Singleton | None = None
    windows: tuple[Window, ...] = ()
    concurrency: Concurrency | None = None
    concurrency_scope: str = ""
    priority: Callable[[Any], Any] | None = None
    fair_by: Callable[[Any], Any] | None = None
    start_timeout: float | None = None
    finish_timeout: float | None = None
    on_failure: str | None = None

    @property
    def throttles(self) -> tuple[Window, ...]:
        return tuple(w for w in self.windows if w.kind == "throttle")

    @property
    def rate_limits(self) -> tuple[Window, ...]:
        return tuple(w for w in self.windows if w.kind == "rate_limit")

    @property
    def deferring(self) -> str | None:
        """The first control that may park or fold a start (blocking starts are refused then)."""
        for name, on in (
            ("debounce", self.debounce),
            ("batch", self.batch),
            ("throttle", self.throttles),
            ("concurrency", self.concurrency),
        ):
            if on:
                return name
        return None

    @property
    def bare(self) -> bool:
        """No control at all: a start is an insert."""
        return not (self.debounce or self.batch or self.singleton or self.windows or self.concurrency)

    @property
    def slot_only(self) -> bool:
        """One control, a per-key concurrency limit: a start waits for nothing but a slot of its key.

        No total, so no burst either (a burst needs a total): the key's room is its limit alone.
        """
        c = self.concurrency
        return c is not None and c.total is None and not (self.debounce or self.batch or self.singleton or self.windows)

    @property
    def debounce_only(self) -> bool:
        """One control, a debounce: a start parks as its group's first arrival, or folds into the open group."""
        return self.debounce is not None and not (self.concurrency or self.windows or self.batch or self.singleton)

    @property
    def batch_only(self) -> bool:
        """One control, a batch: a start opens its key's batch, or is added to the open one (which may fill)."""
        return self.batch is not None and not (self.concurrency or self.windows or self.debounce or self.singleton)

    @property
    def one_window(self) -> bool:
        """One throttle or rate limit, alone or before a per-key concurrency limit (a provider's two limits,
        declared together): a start passes, waits for or is dropped by its window, then waits for a slot."""
        c = self.concurrency
        held = self.debounce or self.batch or self.singleton
        return len(self.windows) == 1 and not held and (c is None or c.total is None)


def _fail(wf: str, fields: str | list[str], problem: str) -> typing.NoReturn:
    raise DefinitionError(wf, fields, problem)


def _seconds(wf: str, field: str, value: Any, *, positive: bool = True) -> float:
    try:
        seconds = to_seconds(value, what=field)
    except ValueError as exc:
        _fail(wf, field, str(exc))
    if positive and seconds <= 0:
        _fail(wf, field, "must be greater than zero")
    return seconds


def _positive_int(wf: str, field: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        _fail(wf, field, f"must be an integer >= 1, got {value!r}")
    return value


def _key(wf: str, field: str, fn: Any) -> Callable[[Any], Any] | None:
    if fn is not None and not callable(fn):
        _fail(wf, field, "must be a callable taking the payload model")
    return typing.cast(Callable[[Any], Any] | None, fn)


def _items_type(model: type[BaseModel]) -> Any:
    field = model.model_fields.get("items")
    if field is None:
        return None
    ann = field.annotation
    if typing.get_origin(ann) is list and typing.get_args(ann):
        return typing.get_args(ann)[0]
    return None


def plan_for(defn: WorkflowDef) -> GatePlan:
    """Validate one workflow's controls on their own; ``DefinitionError`` names the field."""
    wf, opts = defn.name, defn.options
    for option in opts:
        if option not in KNOWN:
            _fail(wf, option, f"unknown workflow option (known: {', '.join(sorted(KNOWN))})")
    for option, kind in OPTIONS.items():
        value = opts.get(option)
        if option in ("throttle", "rate_limit") and isinstance(value, list | tuple):
            if not value or not all(isinstance(v, kind) for v in value):
                _fail(wf, option, f"must be lg.{kind.__name__} or a non-empty list of them")
        elif value is not None and not isinstance(value, kind):
            _fail(wf, option, f"must be lg.{kind.__name__}, got {type(value).__name__}")
    for option in CALLABLES:
        _key(wf, option, opts.get(option))
    fields: dict[str, Any] = {"workflow": wf, "priority": opts.get("priority"), "fair_by": opts.get("fair_by")}

    debounce: Debounce | None = opts.get("debounce")
    batch: Batch | None = opts.get("batch")
    if debounce is not None and batch is not None:
        _fail(wf, ["batch", "debounce"], "cannot both be declared: a batch deadline must not reset per item")
    if debounce is not None:
        _key(wf, "debounce.key", debounce.key)
        if debounce.keep not in ("last", "first", "all"):
            _fail(wf, "debounce.keep", f"must be 'last', 'first' or 'all', not {debounce.keep!r}")
        fields.update(debounce=debounce, debounce_period=_seconds(wf, "debounce.period", debounce.period))
        if debounce.timeout is not None:
            fields["debounce_timeout"] = _seconds(wf, "debounce.timeout", debounce.timeout)
        if debounce.keep == "all":
            item = _items_type(defn.payload_model)
            if not (isinstance(item, type) and issubclass(item, BaseModel)):
                _fail(
                    wf,
                    ["debounce.keep", "payload"],
                    "keep='all' needs a payload model with an 'items: list[Item]' field (Item a pydantic model)",
                )
            fields["item_model"] = item
    if batch is not None:
        _key(wf, "batch.key", batch.key)
        if not (isinstance(batch.item, type) and issubclass(batch.item, BaseModel)):
            _fail(wf, "batch.item", "must be a pydantic model")
        _positive_int(wf, "batch.max_size", batch.max_size)
        item = _items_type(defn.payload_model)
        if item is not batch.item:
            _fail(
                wf,
                ["batch.item", "payload"],
                f"the payload model {defn.payload_model.__name__} needs 'items: list[{batch.item.__name__}]'",
            )
        fields.update(batch=batch, batch_timeout=_seconds(wf, "batch.timeout", batch.timeout), item_model=batch.item)

    singleton: Singleton | None = opts.get("singleton")
    if singleton is not None:
        if singleton.mode is None:
            _fail(wf, "singleton.mode", "has no default: choose 'skip' (newcomer stands down) or 'cancel' (evict)")
        if singleton.mode not in ("skip", "cancel"):
            _fail(wf, "singleton.mode", f"must be 'skip' or 'cancel', not {singleton.mode!r}")
        _key(wf, "singleton.key", singleton.key)
        fields["singleton"] = singleton

    if opts.get("throttle") is not None and opts.get("rate_limit") is not None:
        _fail(
            wf, ["throttle", "rate_limit"], "cannot both be declared: throttle queues the excess, rate_limit drops it"
        )
    windows: list[Window] = []
    for kind_name in ("throttle", "rate_limit"):
        value = opts.get(kind_name)
        entries = list(value) if isinstance(value, list | tuple) else [] if value is None else [value]
        for i, w in enumerate(entries):
            where = f"{kind_name}[{i}]" if len(entries) > 1 else kind_name
            windows.append(
                Window(
                    kind=kind_name,
                    index=i,
                    limit=_positive_int(wf, f"{where}.limit", w.limit),
                    period=_seconds(wf, f"{where}.period", w.period),
                    key=_key(wf, f"{where}.key", w.key),
                    scope=f"pool:{w.pool}" if w.pool else f"wf:{wf}:{kind_name}[{i}]",
                )
            )
    fields["windows"] = tuple(windows)

    concurrency: Concurrency | None = opts.get("concurrency")
    if concurrency is not None:
        limit = _positive_int(wf, "concurrency.limit", concurrency.limit)
        _key(wf, "concurrency.key", concurrency.key)
        if concurrency.total is not None and _positive_int(wf, "concurrency.total", concurrency.total) < limit:
            _fail(wf, ["concurrency.total", "concurrency.limit"], "total must be at least the per-key limit")
        if concurrency.burst is not None:
            if concurrency.total is None:
                _fail(
                    wf, ["concurrency.burst", "concurrency.total"], "burst borrows idle room under a total: set total"
                )
            if _positive_int(wf, "concurrency.burst", concurrency.burst) < limit:
                _fail(wf, ["concurrency.burst", "concurrency.limit"], "burst must be at least the per-key limit")
        fields.update(
            concurrency=concurrency, concurrency_scope=f"pool:{concurrency.pool}" if concurrency.pool else f"wf:{wf}"
        )

    timeouts: Timeouts | None = opts.get("timeouts")
    if timeouts is not None:
        if timeouts.start is not None:
            fields["start_timeout"] = _seconds(wf, "timeouts.start", timeouts.start)
        if timeouts.finish is not None:
            fields["finish_timeout"] = _seconds(wf, "timeouts.finish", timeouts.finish)
    on_failure = opts.get("on_failure")
    if on_failure is not None and (not isinstance(on_failure, str) or not on_failure):
        _fail(wf, "on_failure", "must be the name of a registered workflow")
    fields["on_failure"] = on_failure
    plan = GatePlan(**fields)
    if plan.start_timeout is not None and plan.deferring is None:
        _fail(
            wf,
            ["timeouts.start", "debounce|batch|throttle|concurrency"],
            "a start timeout never fires on a workflow whose starts cannot be parked",
        )
    return plan


def validate_gate(defs: dict[str, WorkflowDef]) -> None:
    """Plan every workflow, then check what spans workflows (pools, failure handlers)."""
    plans = {name: plan_for(d) for name, d in defs.items()}
    pools: dict[str, tuple[str, Any]] = {}
    for name, plan in plans.items():
        shared: list[tuple[str, str, Any]] = []
        if plan.concurrency is not None and plan.concurrency.pool:
            c = plan.concurrency
            shared.append((plan.concurrency_scope, "concurrency.limit", (c.limit, c.total, c.burst)))
        shared += [
            (w.scope, f"{w.name}.limit", (w.kind, w.limit, w.period))
            for w in plan.windows
            if w.scope.startswith("pool:")
        ]
        for scope, field, signature in shared:
            seen = pools.setdefault(scope, (name, signature))
            if seen[1] != signature:
                _fail(
                    name,
                    [field, f"{seen[0]}.{field}"],
                    f"members of {scope} must declare the same limits ({signature} vs {seen[1]} in {seen[0]!r})",
                )
        if plan.on_failure is not None:
            handler = defs.get(plan.on_failure)
            if handler is None:
                _fail(name, "on_failure", f"names {plan.on_failure!r}, which is not registered")
            if not issubclass(handler.payload_model, FailureReport):
                _fail(name, "on_failure", f"handler {plan.on_failure!r} must take lg.FailureReport as its payload")
            if issubclass(defs[name].payload_model, FailureReport):
                _fail(name, "on_failure", "a failure handler has none: a failing handler is logged, never re-reported")
    for name, plan in plans.items():
        defs[name].gate = plan
