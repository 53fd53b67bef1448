"""What the executor and its durable operations share.

``Host`` is what an execution calls on the worker that runs it; ``Running`` is what the
durable operations (timers, values, messages, children) call on the execution they run
in. Both are protocols so that the operations, the execution and the dispatcher depend
on this module and not on each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import random
import typing
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from ..app import App
from ..clock import Clock
from ..crypto import Keyring, Sealer
from ..definitions import WorkflowDef
from ..errors import StepFailed
from ..gate.handoff import HandOff, Passed
from ..gate.runtime import Runtime
from ..observer import Observer
from ..recording import TRUNCATED
from ..serde import dump_json, encode
from ..store import Store, shared
from ..store.base import Row
from .early import EarlyClaims
from .identity import ScopeResolver
from .stream_hub import StreamHub

__all__ = [
    "IN_THREAD",
    "Host",
    "Parked",
    "Running",
    "Wait",
    "attempt_row",
    "call",
    "callable_facts",
    "describe",
    "divergence",
    "kept_input",
    "model_ref",
    "seen",
    "step_entry",
]

T = TypeVar("T")

IN_THREAD: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
"""The tasks awaiting a function ``call`` runs in a thread: cancelling one would not end the function
(a stopping worker waits for those, engine/shutdown.py)."""


class Host(Protocol):
    """What an execution calls on the worker that runs it (the dispatcher)."""

    app: App
    store: Store
    clock: Clock
    keyring: Keyring
    inline_sleep: float
    input_limit: int
    replay_shape_limit: int
    resolve_scopes: ScopeResolver | None
    step_pool: Executor  # the threads plain ``def`` steps run in
    draining: bool  # shutting down: no new step attempt begins
    public_url: str | None  # the base of the URLs callback tokens are completed at (engine/callbacks.py)
    stream_hub: StreamHub  # the cap ctx.stream applies, and who is told of committed chunks
    early: EarlyClaims  # what was begun as a commit went out, to stop should it fail (engine/early.py)

    @property
    def observer(self) -> Observer | None:
        """Where step attempts are reported (metrics, traces), if anywhere."""
        ...

    @property
    def runtime(self) -> Runtime:
        """The seam the gate decides with (a gated child is offered through it)."""
        ...

    def wake(self, at: float | None = None) -> None: ...

    def room_to_wait(self, deep: int, key: str) -> bool:
        """Whether a step refused by flow key ``key``, further back in line than its parallelism, waits in place
        (``deep``: how many such steps wait in place in this worker now)."""
        ...

    async def hand_off(self, defn: WorkflowDef, row: Row, status: str) -> HandOff | None: ...

    def after_finish(
        self, run_id: str, stopped: list[str], ended: Row | None = None, *, settled: bool = False
    ) -> None: ...

    def passed(self, passed: Passed) -> None: ...

    def on_step_error(self, execution: Running, step_key: str, error: BaseException) -> None: ...

    def message_settled(self, message_id: str) -> None: ...

    def published(self) -> None: ...

    def new_run_row(
        self,
        defn: WorkflowDef,
        payload: BaseModel | str,
        *,
        run_id: str | None = None,
        identity: str | None = None,
        idempotency_key: str | None = None,
        ticket: str | None = None,
    ) -> dict[str, Any]: ...


@dataclass
class Wait:
    """Something only the outside world ends, that a blocked body waits for."""

    kind: str
    wake_at: float | None = None
    names: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    models: dict[str, str] = field(default_factory=dict)
    flow_keys: list[str] = field(default_factory=list)  # the step flow-control keys it waits on
    # Run in the park's transaction: whether what it waits for came meanwhile (the run is then due at once).
    on_park: Callable[[Any, float], Awaitable[bool]] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)  # the event waits shown: name and match


class Parked(BaseException):
    """The body is blocked for good; the executor parks the run."""


class Running(Protocol):
    """What a durable operation uses of the execution it runs in."""

    run_id: str
    row: Row
    fence: shared.Fence

    @property
    def host(self) -> Host: ...

    @property
    def store(self) -> Store: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def rng(self) -> random.Random: ...

    @property
    def sealer(self) -> Sealer | None:
        """What seals and opens the run's values when it is encrypted; ``None`` otherwise."""
        ...

    def key(self, name: str) -> str:
        """The journal key of the next occurrence of ``name`` in this entry."""
        ...

    def entry(self, key: str) -> Row | None:
        """The journal entry recorded under ``key``, if any."""
        ...

    def busy(self) -> AbstractAsyncContextManager[None]:
        """``async with``: the body is doing something only it can finish."""
        ...

    async def record(self, entry: dict[str, Any], *, message: dict[str, Any] | None = None) -> None:
        """Write a journal entry now (with a message's settlement in the same commit)."""
        ...

    async def record_with(self, entry: dict[str, Any], before: Callable[[Any], Awaitable[T]]) -> T:
        """Write a journal entry in the transaction ``before(tx)`` runs in first."""
        ...

    async def record_if(self, before: Callable[[Any], Awaitable[tuple[dict[str, Any] | None, T]]]) -> T:
        """Run ``before(tx)`` in a write: it answers ``(entry, result)``, and the entry, if any, is
        journaled in that transaction (what to journal is known only once ``before`` has read)."""
        ...

    def event(self, type_: str, data: dict[str, Any] | None = None) -> None:
        """Add a lifecycle event to the run (not waited for)."""
        ...

    async def block(self, wait: Wait) -> typing.NoReturn:
        """Wait for something only the outside world ends; the run parks meanwhile."""
        ...


_FACTS: weakref.WeakKeyDictionary[Any, tuple[Any, bool]] = weakref.WeakKeyDictionary()


def callable_facts(fn: Callable[..., Any]) -> tuple[Any, bool]:
    """``fn``'s return annotation and whether it is async, worked out once per function."""
    target = getattr(fn, "func", fn)  # functools.partial
    target = getattr(target, "__func__", target)  # a bound method: its function
    try:
        return _FACTS[target]
    except (KeyError, TypeError):
        pass
    try:
        rtype = typing.get_type_hints(target).get("return")
    except Exception:
        rtype = None
    facts = (rtype, inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "func", None)))
    with contextlib.suppress(TypeError):  # not weakly referenceable: worked out each time
        _FACTS[target] = facts
    return facts


async def call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], pool: Executor | None = None
) -> Any:
    """Call ``fn``: awaited if async, in a thread of ``pool`` if not (the loop's default pool without one)."""
    if callable_facts(fn)[1]:
        return await fn(*args, **kwargs)
    task = asyncio.current_task()
    if task is not None:
        IN_THREAD.add(task)
    try:
        if pool is None:
            result = await asyncio.to_thread(fn, *args, **kwargs)
        else:  # as to_thread does: the step sees the context variables of its caller
            bound = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
            result = await asyncio.get_running_loop().run_in_executor(pool, bound)
    finally:
        if task is not None:
            IN_THREAD.discard(task)
    if inspect.isawaitable(result):
        return await result
    return result


def step_output(name: str, result: Any, rtype: Any) -> str:
    """A step's result as its journal entry stores it; ``TypeError`` when JSON cannot hold it."""
    try:
        return encode(result, rtype)
    except Exception as exc:
        raise TypeError(f"ctx.step({name!r}): its result cannot be stored as JSON: {exc}") from exc


def kept_input(value: Any, limit: int) -> str:
    """A step's ``input=`` as its attempt row keeps it: whole up to ``limit`` bytes, else its head, marked."""
    text = encode(value)
    if len(text) <= limit // 4:  # at most 4 bytes a character: short enough without encoding it
        return text
    data = text.encode()
    if len(data) <= limit:
        return text
    return dump_json({TRUNCATED: True, "size": len(data), "head": data[:limit].decode(errors="ignore")})


def model_ref(name: str, model: type[BaseModel]) -> dict[str, str]:
    """Where a client can import the model a body waits with (none for local classes)."""
    if "<locals>" in model.__qualname__:
        return {}
    return {name: f"{model.__module__}:{model.__qualname__}"}


def describe(exc: BaseException) -> tuple[str, str]:
    """The error tag and message an exception is recorded with."""
    if isinstance(exc, StepFailed):
        return exc.error_tag, str(exc)
    return type(exc).__name__, str(exc) or type(exc).__name__


def attempt_row(
    run_id: str,
    key: str,
    attempt: int,
    started: float,
    finished: float,
    input_: str | None,
    tag: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """A step attempt's introspection row: failed when it has an error tag, else completed."""
    return {
        "run_id": run_id,
        "step_key": key,
        "attempt": attempt,
        "status": "completed" if tag is None else "failed",
        "input": input_,
        "error_tag": tag,
        "error_message": message,
        "started_at": started,
        "finished_at": finished,
    }


def divergence(
    recorded: list[str], reached: set[str], extra: list[str], journal: dict[str, Row], *, parked: bool
) -> dict[str, Any] | None:
    """What suggests a body no longer follows its journal: recorded keys not reached, new keys among them.

    ``extra`` holds the new keys made before some recorded one. A parked body has not run past
    its wait, so only completed steps it skipped beside such extras are telling.
    """
    unreached = [k for k in recorded if k not in reached]
    if parked:
        unreached = [
            k for k in unreached if journal[k]["status"] == "completed" and journal[k]["kind"] == "step" and extra
        ]
    if unreached or extra:
        return {"unreached": unreached, "extra": extra}
    return None


def step_entry(key: str, status: str, attempts: int, started_at: float, flow_wait: float | None, **values: Any) -> Row:
    """A step's journal entry as it settles: ``completed`` with its output, ``failed`` with its error."""
    return {
        "step_key": key,
        "kind": "step",
        "status": status,
        "attempts": attempts,
        "started_at": started_at,
        "flow_wait": flow_wait,
        **values,
    }


def seen(future: asyncio.Future[Any]) -> None:
    """A done callback that retrieves a failure, so that one nobody awaits is not reported as lost."""
    if not future.cancelled():
        future.exception()
