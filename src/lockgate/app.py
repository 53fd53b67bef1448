"""The workflow registry: ``App`` and its ``@app.workflow`` decorator.

Declarations are kept as given and validated once, when an ``Engine`` or ``Client``
boots, so that every problem surfaces as a ``DefinitionError`` naming the workflow and
the field, in one place. Validation builds each frozen ``WorkflowDef`` whole, its gate
plan included (``App.validate``).
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from pydantic import BaseModel

from .controls import WorkflowOptions, read_options
from .definitions import Body, WorkflowDef, as_tuple
from .durations import Duration, to_seconds
from .errors import DefinitionError, InvalidArgument, UnknownWorkflow
from .events import EventDef, TriggerDef, validate_events
from .flowcontrol import check_flow_keys
from .names import name_problem
from .plan import GatePlan, check_shared, plan_for
from .queues import Queue, member_controls
from .routing import Labels
from .schedule import Schedule, ScheduleDef, build_schedules
from .webhooks import MAX_BODY, HmacSignature, Transform, WebhookDef, validate_webhooks

__all__ = ["App"]

F = TypeVar("F", bound=Callable[..., Any])

_CORE_OPTIONS = {
    "idempotency_key",
    "version",
    "compatible_with",
    "patches",
    "suspend_on_failure",
    "encrypt_steps",
    "stall_after",
    "on_stalled",
    "signals",
    "updates",
    "schedule",
    "cancel_on",
    "queue",
    "gate_as_child",
    "runs_on",
}


@dataclass
class _Declaration:
    name: str
    fn: Body
    options: dict[str, Any] = field(default_factory=dict)


class App:
    """A registry of workflows. Declare with ``@app.workflow(...)``; run with ``Engine(app)``."""

    def __init__(self, name: str = "lockgate") -> None:
        self.name = name
        self._declared: list[_Declaration] = []
        self._built: dict[str, WorkflowDef] | None = None
        self._scheduled: list[tuple[str, Any, Schedule]] = []
        self._built_schedules: dict[str, ScheduleDef] | None = None
        self._events: list[EventDef] = []
        self._triggers: list[TriggerDef] = []
        self._queues: list[Queue] = []
        self.events: dict[str, EventDef] = {}  # by name, once validated
        self._webhooks: list[WebhookDef] = []
        self.webhooks: dict[str, WebhookDef] = {}  # by name, once validated

    @overload
    def workflow(self, fn: F, /) -> F: ...

    @overload
    def workflow(self, fn: None = None, /, *, name: str | None = None, **options: Any) -> Callable[[F], F]: ...

    def workflow(self, fn: F | None = None, /, *, name: str | None = None, **options: Any) -> Any:
        """Register an ``async def body(ctx, payload: Model) -> Result`` as a workflow.

        Usable bare (``@app.workflow``) or with options (``@app.workflow(name=...)``).
        The decorated function is returned unchanged, so it can be passed to
        ``engine.start`` in place of its name.
        """

        def register(body: F) -> F:
            wf_name = name if name is not None else f"{body.__module__}.{body.__qualname__}"
            self._declared.append(_Declaration(wf_name, body, dict(options)))
            body.__lockgate_workflow__ = wf_name  # type: ignore[attr-defined]
            self._built = self._built_schedules = None
            return body

        if fn is not None:
            return register(fn)
        return register

    # -- domain events (events.py) ---------------------------------------------------------

    def event(
        self, name: str, *, key: type[BaseModel] | None = None, payload: type[BaseModel] | None = None
    ) -> EventDef:
        """Declare the domain event ``name``; the descriptor is what triggers, ``cancel_on`` and publish take."""
        declared = EventDef(name, key, payload)
        self._events.append(declared)
        self._built = None
        return declared

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        rate_limit: tuple[int, Duration] | None = None,
        priority: int | Callable[[Any], int] | None = None,
    ) -> Queue:
        """Declare the durable queue ``name``; workflows join it with ``@app.workflow(queue=...)``.

        Its controls become each member's: one concurrency pool and one throttle window shared
        by every member, and the members' priority (see ``queues.Queue``).
        """
        if any(q.name == name for q in self._queues):
            raise DefinitionError(f"queue:{name}", "name", "declared twice")
        declared = Queue(name, concurrency, rate_limit, priority)
        self._queues.append(declared)
        self._built = None
        return declared

    @property
    def queues(self) -> dict[str, Queue]:
        """The declared queues by name."""
        return {q.name: q for q in self._queues}

    def trigger(
        self,
        *,
        on: EventDef | str,
        workflow: str | Callable[..., Any],
        filter: Callable[[Any], Any] | None = None,
        payload: Callable[[Any], Any] | None = None,
        idempotency_key: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> TriggerDef:
        """Start ``workflow`` for every ``on`` event (``"*"``: every event); see ``events.TriggerDef``."""
        trigger = TriggerDef("", on, workflow, filter, payload, idempotency_key)
        trigger = TriggerDef(
            name or f"{trigger.event_name}->{trigger.workflow_name}", on, workflow, filter, payload, idempotency_key
        )
        self._triggers.append(trigger)
        self._built = None
        return trigger

    @property
    def triggers(self) -> list[TriggerDef]:
        """The declared triggers, in declaration order."""
        return list(self._triggers)

    def webhook(
        self,
        name: str,
        *,
        event: EventDef,
        verify: HmacSignature,
        transform: Transform | None = None,
        dedupe: str | None = None,
        max_body: int = MAX_BODY,
    ) -> WebhookDef:
        """Accept ``POST /hooks/{name}`` signed per ``verify`` and publish it as ``event`` (see ``webhooks.py``)."""
        hook = WebhookDef(name, event, verify, transform, dedupe, max_body)
        self._webhooks.append(hook)
        self._built = None
        return hook

    # -- boot -------------------------------------------------------------------------

    def validate(self) -> dict[str, WorkflowDef]:
        """Build every workflow's definition anew; raises ``DefinitionError`` for the first problem.

        Problems are found in a fixed order: each declaration's body and core options, then
        each workflow's flow controls, then what spans workflows (pools, failure handlers).
        """
        drafts: dict[str, WorkflowDef] = {}
        for declared in self._queues:
            _check_name(f"queue:{declared.name}", "name", declared.name)
        for decl in self._declared:
            _check_name(decl.name, "name", decl.name)
            if decl.name in drafts:
                raise DefinitionError(decl.name, "name", "registered twice")
            drafts[decl.name] = _build(decl)
            queue = decl.options.get("queue")
            if isinstance(queue, Queue) and queue not in self._queues:
                raise DefinitionError(decl.name, "queue", f"queue {queue.name!r} is not declared in this app")
        controls = {decl.name: _controls(decl) for decl in self._declared}
        for name, options in controls.items():
            if drafts[name].encrypt_steps:
                _check_sealable(name, options)
        plans = {name: plan_for(name, drafts[name].payload_model, options) for name, options in controls.items()}
        check_shared(plans, {name: d.payload_model for name, d in drafts.items()})
        check_flow_keys({name: options.flow_control for name, options in controls.items()})
        return {
            name: dataclasses.replace(draft, options=controls[name], gate=plans[name]) for name, draft in drafts.items()
        }

    def definitions(self) -> dict[str, WorkflowDef]:
        """Every workflow, validated once (``validate``) and kept until another is declared.

        The schedules are validated with them: a bad one refuses the boot like a bad workflow.
        """
        if self._built is None:
            built = self.validate()
            on_workflows = [(d.name, d.options["schedule"]) for d in self._declared if d.options.get("schedule")]
            models = {name: defn.payload_model for name, defn in built.items()}
            self._built_schedules = build_schedules(on_workflows, self._scheduled, models, time.time())
            self.events = validate_events(self._events, self._triggers, built)
            self.webhooks = validate_webhooks(self._webhooks, self.events)
            self._built = built
        return self._built

    def schedule(self, name: str, *, workflow: str | Callable[..., Any], **options: Any) -> None:
        """Start ``workflow`` by the clock under ``name``: ``cron=`` or ``every=``, and any other
        ``lg.Schedule`` option. Several schedules of one workflow may differ in payload."""
        try:
            given = Schedule(**options)
        except TypeError as exc:
            shown = (
                workflow if isinstance(workflow, str) else getattr(workflow, "__lockgate_workflow__", repr(workflow))
            )
            raise DefinitionError(str(shown), "schedule", f"schedule {name!r}: {exc}") from None
        self._scheduled.append((name, workflow, given))
        self._built = self._built_schedules = None

    def schedules(self) -> dict[str, ScheduleDef]:
        """Every schedule, validated with the workflows (``DefinitionError`` for the first problem)."""
        self.definitions()
        assert self._built_schedules is not None
        return self._built_schedules

    def get(self, workflow: str | Callable[..., Any]) -> WorkflowDef:
        """The definition registered under ``workflow`` (a name or the decorated function)."""
        defs = self.definitions()
        key = workflow if isinstance(workflow, str) else getattr(workflow, "__lockgate_workflow__", None)
        if key is None or key not in defs:
            shown = workflow if isinstance(workflow, str) else getattr(workflow, "__qualname__", repr(workflow))
            raise UnknownWorkflow(str(shown), defs)
        return defs[key]

    @property
    def names(self) -> list[str]:
        """The names declared so far, in declaration order."""
        return [d.name for d in self._declared]


def _build(decl: _Declaration) -> WorkflowDef:
    """The definition from the body and the core options, before its flow controls are read.

    Its controls are left empty (a bare plan) until ``App.validate`` reads and plans them,
    which it does for every workflow only once every body has been checked.
    """
    name, opts = decl.name, decl.options
    model, result_type = _body_types(name, decl.fn)
    key_fn = opts.get("idempotency_key")
    if key_fn is not None and not callable(key_fn):
        raise DefinitionError(name, "idempotency_key", "must be a callable taking the payload model")
    version, compatible, patches = _versioning(name, opts)
    stall_after, on_stalled = _staleness(name, opts)
    encrypt_steps = opts.get("encrypt_steps", False)
    if not isinstance(encrypt_steps, bool):
        raise DefinitionError(name, "encrypt_steps", f"must be True or False, got {encrypt_steps!r}")
    return WorkflowDef(
        name=name,
        fn=decl.fn,
        payload_model=model,
        result_type=result_type,
        idempotency_key=key_fn,
        version=version,
        compatible_with=compatible,
        patches=patches,
        suspend_on_failure=bool(opts.get("suspend_on_failure", False)),
        encrypt_steps=encrypt_steps,
        stall_after=stall_after,
        on_stalled=on_stalled,
        signals=_messages(name, "signals", opts.get("signals")),
        updates=_messages(name, "updates", opts.get("updates")),
        cancel_on=tuple(opts.get("cancel_on") or ()),
        queue=None if opts.get("queue") is None else getattr(opts["queue"], "name", None),
        gate_as_child=_flag(name, "gate_as_child", opts.get("gate_as_child", True)),
        runs_on=_runs_on(name, opts.get("runs_on")),
        gate=GatePlan(workflow=name),
    )


def _check_sealable(name: str, options: WorkflowOptions) -> None:
    """An ``encrypt_steps`` workflow may not declare a control that merges its payloads in the gate."""
    if options.batch is not None:
        # the gate merges a batch's items as it folds them: they would have to wait in clear
        raise DefinitionError(name, ["encrypt_steps", "batch"], "cannot both be declared: batch items are merged")
    if options.debounce is not None and options.debounce.keep == "all":
        raise DefinitionError(
            name, ["encrypt_steps", "debounce.keep"], "keep='all' cannot be encrypted: the items are merged"
        )


def _body_types(name: str, fn: Body) -> tuple[type[BaseModel], Any]:
    """The body's payload model and result type (``None`` for ``-> None``), from its annotations."""
    if not inspect.iscoroutinefunction(fn):
        raise DefinitionError(name, "body", "must be an 'async def' taking (ctx, payload)")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise DefinitionError(name, "body", f"annotations cannot be resolved: {exc}") from None
    params = list(inspect.signature(fn).parameters.values())
    if len(params) != 2:
        raise DefinitionError(name, "body", f"must take exactly (ctx, payload), takes {len(params)} parameter(s)")
    model = hints.get(params[1].name)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise DefinitionError(name, "payload", f"parameter {params[1].name!r} must be annotated with a pydantic model")
    result_type = hints.get("return", Any)
    return model, None if result_type is type(None) else result_type


def _versioning(name: str, opts: dict[str, Any]) -> tuple[str | None, tuple[str, ...], tuple[str, ...]]:
    """``version``, the versions it is ``compatible_with``, and its ``patches``."""
    version = opts.get("version")
    if version is not None and (not isinstance(version, str) or not version):
        raise DefinitionError(name, "version", f"must be a non-empty string, got {version!r}")
    compatible = _strings(name, "compatible_with", opts.get("compatible_with"))
    if compatible and version is None:
        raise DefinitionError(name, ["compatible_with", "version"], "compatible_with needs a version")
    if version is not None and version in compatible:
        raise DefinitionError(
            name, ["compatible_with", "version"], f"compatible_with names the current version {version!r}"
        )
    return version, compatible, _strings(name, "patches", opts.get("patches"))


def _runs_on(name: str, declared: Any) -> Labels:
    """``runs_on``: the labels a worker must have to take the workflow's runs."""
    if declared is None:
        return Labels()
    if not isinstance(declared, Mapping):
        raise DefinitionError(name, "runs_on", f"must be lg.Labels(key=value, ...), got {type(declared).__name__}")
    try:
        return declared if isinstance(declared, Labels) else Labels(declared)
    except InvalidArgument as exc:
        raise DefinitionError(name, "runs_on", str(exc)) from None


def _staleness(name: str, opts: dict[str, Any]) -> tuple[float | None, Callable[[Any], Any] | None]:
    """``stall_after`` in seconds and the ``on_stalled`` callback."""
    stall_after: float | None = None
    if opts.get("stall_after") is not None:
        try:
            stall_after = to_seconds(opts["stall_after"], what="stall_after")
        except ValueError as exc:
            raise DefinitionError(name, "stall_after", str(exc)) from None
    on_stalled = opts.get("on_stalled")
    if on_stalled is not None and not callable(on_stalled):
        raise DefinitionError(name, "on_stalled", "must be callable")
    return stall_after, on_stalled


def _messages(name: str, kind: str, declared: Any) -> dict[str, type[BaseModel]]:
    """The declared ``signals`` or ``updates``: message names mapped to their pydantic models."""
    declared = declared or {}
    if not isinstance(declared, dict) or not all(
        isinstance(k, str) and isinstance(v, type) and issubclass(v, BaseModel) for k, v in declared.items()
    ):
        raise DefinitionError(name, kind, "must map names to pydantic models")
    for message in declared:
        _check_name(name, kind, message)
    return dict(declared)


def _check_name(owner: str, field: str, name: Any) -> None:
    """``DefinitionError`` naming ``field`` of ``owner`` when ``name`` cannot name anything (names.py)."""
    problem = name_problem(name)
    if problem is not None:
        raise DefinitionError(owner, field, problem)


def _controls(decl: _Declaration) -> WorkflowOptions:
    """The declaration's flow-control options (every option that is not a core one, and its queue's), typed."""
    declared = {k: v for k, v in decl.options.items() if k not in _CORE_OPTIONS}
    queue = decl.options.get("queue")
    if queue is not None:
        declared = member_controls(decl.name, queue, declared)
    return read_options(decl.name, declared)


def _flag(workflow: str, option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise DefinitionError(workflow, option, f"must be True or False, got {value!r}")
    return value


def _strings(workflow: str, option: str, value: Any) -> tuple[str, ...]:
    """A string or a list of strings, as a tuple; anything else is a ``DefinitionError``."""
    if value is not None and not isinstance(value, str | list | tuple):
        raise DefinitionError(workflow, option, f"must be a string or a list of strings, got {value!r}")
    names = as_tuple(value)
    if any(not isinstance(n, str) or not n for n in names):
        raise DefinitionError(workflow, option, f"must be non-empty strings, got {value!r}")
    return names
