"""The gate plan: each workflow's controls resolved into what the gate reads per start.

A plan is a definition, not admission machinery: it is built once, when the ``App``
validates its workflows (``plan_for`` per workflow, then ``check_shared`` across them),
and stored on the frozen ``WorkflowDef`` as ``defn.gate``. It lives with the definitions
(layer 0) so that building a definition never reaches up into ``gate/``, which only
reads the plan.

Each control is planned by its own step (``_debounce_plan``, ``_batch_plan``, ...), in
the order a refusal is reported: a ``DefinitionError`` names the workflow and the fields.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from .controls import (
    Batch,
    Concurrency,
    Debounce,
    FailureReport,
    RateLimit,
    Singleton,
    Throttle,
    Timeouts,
    WorkflowOptions,
    callable_or_none,
)
from .durations import to_seconds
from .errors import DefinitionError

__all__ = ["GatePlan", "Window", "check_shared", "plan_for"]


@dataclass(frozen=True)
class Window:
    """One sliding window (of a throttle or a rate limit), resolved."""

    kind: Literal["throttle", "rate_limit"]
    index: int
    limit: int
    period: float
    key: Callable[[Any], Any] | None
    scope: str  # the pool name, or the workflow's own
    burst: int | None = None  # a throttle's token bucket (``rules.bucket_*``); ``None``: the sliding window

    @property
    def name(self) -> str:
        """The indexed name (``throttle[0]``, ``rate_limit[1]``) a pool refusal names the window by."""
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
        """The throttle windows (the excess waits), in declaration order."""
        return tuple(w for w in self.windows if w.kind == "throttle")

    @property
    def rate_limits(self) -> tuple[Window, ...]:
        """The rate-limit windows (the excess is dropped), in declaration order."""
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


def plan_for(workflow: str, payload_model: type[BaseModel], options: WorkflowOptions) -> GatePlan:
    """Validate one workflow's controls on their own and resolve them; ``DefinitionError`` names the field."""
    wf, o = workflow, options
    if o.debounce is not None and o.batch is not None:
        _fail(wf, ["batch", "debounce"], "cannot both be declared: a batch deadline must not reset per item")
    debounce_period, debounce_timeout, item_model = 0.0, None, None
    if o.debounce is not None:
        debounce_period, debounce_timeout, item_model = _debounce_plan(wf, o.debounce, payload_model)
    batch_timeout = 0.0
    if o.batch is not None:
        batch_timeout = _batch_plan(wf, o.batch, payload_model)
        item_model = o.batch.item
    if o.singleton is not None:
        _check_singleton(wf, o.singleton)
    windows = _windows_plan(wf, o)
    concurrency_scope = _concurrency_plan(wf, o.concurrency) if o.concurrency is not None else ""
    start_timeout, finish_timeout = _timeouts_plan(wf, o.timeouts) if o.timeouts is not None else (None, None)
    plan = GatePlan(
        workflow=wf,
        debounce=o.debounce,
        debounce_period=debounce_period,
        debounce_timeout=debounce_timeout,
        batch=o.batch,
        batch_timeout=batch_timeout,
        item_model=item_model,
        singleton=o.singleton,
        windows=windows,
        concurrency=o.concurrency,
        concurrency_scope=concurrency_scope,
        priority=o.priority,
        fair_by=o.fair_by,
        start_timeout=start_timeout,
        finish_timeout=finish_timeout,
        on_failure=o.on_failure,
    )
    if plan.start_timeout is not None and plan.deferring is None:
        _fail(
            wf,
            ["timeouts.start", "debounce|batch|throttle|concurrency"],
            "a start timeout never fires on a workflow whose starts cannot be parked",
        )
    return plan


def _debounce_plan(
    wf: str, debounce: Debounce, payload_model: type[BaseModel]
) -> tuple[float, float | None, type[BaseModel] | None]:
    """The debounce's period and timeout in seconds, and the item model when it keeps ``"all"``."""
    callable_or_none(wf, "debounce.key", debounce.key)
    if debounce.keep not in ("last", "first", "all"):
        _fail(wf, "debounce.keep", f"must be 'last', 'first' or 'all', not {debounce.keep!r}")
    period = _seconds(wf, "debounce.period", debounce.period)
    timeout = _seconds(wf, "debounce.timeout", debounce.timeout) if debounce.timeout is not None else None
    if debounce.keep != "all":
        return period, timeout, None
    item = _items_type(payload_model)
    if not (isinstance(item, type) and issubclass(item, BaseModel)):
        _fail(
            wf,
            ["debounce.keep", "payload"],
            "keep='all' needs a payload model with an 'items: list[Item]' field (Item a pydantic model)",
        )
    return period, timeout, item


def _batch_plan(wf: str, batch: Batch, payload_model: type[BaseModel]) -> float:
    """The batch's timeout in seconds, once its item matches the payload's ``items``."""
    callable_or_none(wf, "batch.key", batch.key)
    if not (isinstance(batch.item, type) and issubclass(batch.item, BaseModel)):
        _fail(wf, "batch.item", "must be a pydantic model")
    _positive_int(wf, "batch.max_size", batch.max_size)
    if _items_type(payload_model) is not batch.item:
        _fail(
            wf,
            ["batch.item", "payload"],
            f"the payload model {payload_model.__name__} needs 'items: list[{batch.item.__name__}]'",
        )
    return _seconds(wf, "batch.timeout", batch.timeout)


def _check_singleton(wf: str, singleton: Singleton) -> None:
    """A singleton must choose its mode: there is no safe default."""
    if singleton.mode is None:
        _fail(wf, "singleton.mode", "has no default: choose 'skip' (newcomer stands down) or 'cancel' (evict)")
    if singleton.mode not in ("skip", "cancel"):
        _fail(wf, "singleton.mode", f"must be 'skip' or 'cancel', not {singleton.mode!r}")
    callable_or_none(wf, "singleton.key", singleton.key)


def _windows_plan(wf: str, options: WorkflowOptions) -> tuple[Window, ...]:
    """Every throttle or rate limit window, resolved; a field is indexed when there are several."""
    if options.throttle and options.rate_limit:
        _fail(
            wf, ["throttle", "rate_limit"], "cannot both be declared: throttle queues the excess, rate_limit drops it"
        )
    windows: list[Window] = []
    groups: tuple[tuple[Literal["throttle", "rate_limit"], tuple[Throttle | RateLimit, ...]], ...] = (
        ("throttle", options.throttle),
        ("rate_limit", options.rate_limit),
    )
    for kind, entries in groups:
        for i, w in enumerate(entries):
            where = f"{kind}[{i}]" if len(entries) > 1 else kind
            windows.append(
                Window(
                    kind=kind,
                    index=i,
                    limit=_positive_int(wf, f"{where}.limit", w.limit),
                    period=_seconds(wf, f"{where}.period", w.period),
                    key=callable_or_none(wf, f"{where}.key", w.key),
                    scope=f"pool:{w.pool}" if w.pool else f"wf:{wf}:{kind}[{i}]",
                    burst=_burst(wf, where, w) if isinstance(w, Throttle) else None,
                )
            )
    return tuple(windows)


def _burst(wf: str, where: str, throttle: Throttle) -> int | None:
    """A throttle's ``burst``: absent, or a non-negative int (the starts an idle key lets through at once
    beyond the first)."""
    burst: Any = throttle.burst
    if burst is None:
        return None
    if not isinstance(burst, int) or isinstance(burst, bool) or not 0 <= burst <= MAX_LIMIT:
        _fail(wf, f"{where}.burst", f"must be an integer from 0 to {MAX_LIMIT}, got {_shown(burst)}")
    return int(burst)


def _concurrency_plan(wf: str, concurrency: Concurrency) -> str:
    """The scope whose slots the limit counts: the pool, or the workflow's own."""
    limit = _positive_int(wf, "concurrency.limit", concurrency.limit)
    callable_or_none(wf, "concurrency.key", concurrency.key)
    if concurrency.total is not None and _positive_int(wf, "concurrency.total", concurrency.total) < limit:
        _fail(wf, ["concurrency.total", "concurrency.limit"], "total must be at least the per-key limit")
    if concurrency.burst is not None:
        if concurrency.total is None:
            _fail(wf, ["concurrency.burst", "concurrency.total"], "burst borrows idle room under a total: set total")
        if _positive_int(wf, "concurrency.burst", concurrency.burst) < limit:
            _fail(wf, ["concurrency.burst", "concurrency.limit"], "burst must be at least the per-key limit")
    return f"pool:{concurrency.pool}" if concurrency.pool else f"wf:{wf}"


def _timeouts_plan(wf: str, timeouts: Timeouts) -> tuple[float | None, float | None]:
    """The start and finish timeouts in seconds."""
    start = _seconds(wf, "timeouts.start", timeouts.start) if timeouts.start is not None else None
    finish = _seconds(wf, "timeouts.finish", timeouts.finish) if timeouts.finish is not None else None
    return start, finish


def check_shared(plans: Mapping[str, GatePlan], payload_models: Mapping[str, type[BaseModel]]) -> None:
    """Check what spans workflows: pools declare one set of limits, failure handlers exist and fit.

    ``payload_models`` maps every registered workflow to its payload model.
    """
    pools: dict[str, tuple[str, Any]] = {}
    for name, plan in plans.items():
        _check_pools(name, plan, pools)
        if plan.on_failure is not None:
            _check_failure_handler(name, plan.on_failure, payload_models)


def _check_pools(name: str, plan: GatePlan, pools: dict[str, tuple[str, Any]]) -> None:
    """Every member of a pool declares the same limits as its first member (recorded in ``pools``)."""
    # A pool's slots and its windows are counted apart (a queue names one pool for both): each is
    # compared with the same kind of limit of the pool's first member.
    shared: list[tuple[str, str, str, Any]] = []  # (kind, scope, field, what members must share)
    if plan.concurrency is not None and plan.concurrency.pool:
        c = plan.concurrency
        shared.append(("slots", plan.concurrency_scope, "concurrency.limit", (c.limit, c.total, c.burst)))
    for w in plan.windows:
        if w.scope.startswith("pool:"):
            shared.append(("window", w.scope, f"{w.name}.limit", (w.kind, w.limit, w.period)))
            shared.append(("bucket", w.scope, f"{w.name}.burst", w.burst))
    for kind, scope, field, signature in shared:
        seen = pools.setdefault(f"{kind} {scope}", (name, signature))
        if seen[1] != signature:
            _fail(
                name,
                [field, f"{seen[0]}.{field}"],
                f"members of {scope} must declare the same limits ({signature} vs {seen[1]} in {seen[0]!r})",
            )


def _check_failure_handler(name: str, handler: str, payload_models: Mapping[str, type[BaseModel]]) -> None:
    """The ``on_failure`` handler is registered, takes a ``FailureReport``, and is not itself a handler."""
    model = payload_models.get(handler)
    if model is None:
        _fail(name, "on_failure", f"names {handler!r}, which is not registered")
    if not issubclass(model, FailureReport):
        _fail(name, "on_failure", f"handler {handler!r} must take lg.FailureReport as its payload")
    if issubclass(payload_models[name], FailureReport):
        _fail(name, "on_failure", "a failure handler has none: a failing handler is logged, never re-reported")


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


MAX_LIMIT = 1_000_000_000
"""The largest count a control declares (a limit, a batch size): a database integer holds it."""


def _positive_int(wf: str, field: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_LIMIT:
        _fail(wf, field, f"must be an integer from 1 to {MAX_LIMIT}, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    return repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."


def _items_type(model: type[BaseModel]) -> Any:
    """The element type of the model's ``items: list[...]`` field, or ``None``."""
    field = model.model_fields.get("items")
    if field is None:
        return None
    ann = field.annotation
    if typing.get_origin(ann) is list and typing.get_args(ann):
        return typing.get_args(ann)[0]
    return None
