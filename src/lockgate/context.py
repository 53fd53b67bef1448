"""``Context``: what a workflow body may do. The executor implements it.

Everything a body does that touches the world goes through the context, so that a
re-entered body can replay what was recorded instead of doing it again.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from .compensation import Compensations
from .definitions import Retry
from .durations import Duration
from .flowcontrol import INHERIT
from .origin import SYSTEM_SUBJECT, Subject

__all__ = ["ChildHandle", "Context", "ParentClose"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
ParentClose = Literal["cancel", "terminate", "abandon"]


@dataclass(frozen=True)
class ChildHandle:
    """A child started from a body; pass it to ``ctx.wait_child``.

    A child offered to its workflow's gate (the default) has its ``ticket`` and the gate's
    ``status`` (``started``, ``existing``, ``queued``, ``dropped``, ``skipped``); ``run_id``
    is ``None`` until it is admitted (a queued child) or for good (a dropped one).
    """

    run_id: str | None
    workflow: str
    ticket: str | None = None
    status: str = "started"
    parent_close: ParentClose = "cancel"


class Context(abc.ABC):
    """The durable operations available inside a workflow body."""

    run_id: str
    workflow: str
    attempt: int

    @abc.abstractmethod
    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        flow_control: Any = INHERIT,
        input: Any = None,
        cost: int | None = None,
        settle: Callable[[Any], int] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once and journal its result; a replay returns the record.

        ``flow_control``: an ``lg.FlowControl`` replaces the run's for this step; ``None``
        exempts it; by default the run's (given at start, else the workflow's) applies.
        Under a weighted key (``FlowControl(cost=)``), ``cost`` is the units this call
        reserves (instead of the key's cost) and ``settle`` a callable of its result giving
        the units it really used (instead of the key's ``settle``).

        A ``def`` runs in a worker thread, an ``async def`` is awaited. The result is stored
        as JSON through pydantic and decoded back to ``fn``'s return annotation on replay.
        Reusing ``name`` (in a loop) journals each occurrence separately.
        """

    @abc.abstractmethod
    async def sleep(self, name: str, duration: Duration) -> None:
        """Wait durably. A long sleep releases the worker and wakes at the instant, even after a restart."""

    @abc.abstractmethod
    async def sleep_until(self, name: str, when: datetime) -> None:
        """Wait durably until ``when`` (an aware datetime)."""

    @abc.abstractmethod
    async def wait_for_signal(self, name: str, model: type[M], *, timeout: Duration | None = None) -> M | None:
        """The next signal ``name`` sent to this run, as ``model``; ``None`` when ``timeout`` passes first."""

    @abc.abstractmethod
    async def handle_update(self, name: str, model: type[M], handler: Callable[[M], Awaitable[T] | T]) -> T:
        """Serve one update ``name``: validate it, run ``handler``, return its result to the caller and here."""

    @abc.abstractmethod
    async def start_child(
        self,
        workflow: str | Callable[..., Any],
        payload: Any,
        *,
        parent_close: ParentClose = "cancel",
        gate: bool | None = None,
        queue: Any = None,
        flow_control: Any = None,
    ) -> ChildHandle:
        """Start a child run; the lineage is journaled before the child exists.

        ``gate=True`` offers it to its workflow's gate like ``engine.start`` (it takes a
        concurrency slot, a window, a fold); ``gate=False`` creates it at once; ``None`` takes
        the child workflow's ``gate_as_child`` (default ``True``: through its gate). A parent
        gives its own concurrency slot back while it waits on a child, so gated children cannot
        deadlock with limited parents. ``flow_control`` (an ``lg.FlowControl``) is the child
        run's own step flow control, checked like ``engine.start(flow_control=)``
        (``InvalidArgument``, nothing started). ``queue`` is what ``enqueue`` passes.
        """

    async def enqueue(self, queue: Any, workflow: str | Callable[..., Any], payload: Any) -> ChildHandle:
        """Put ``workflow`` (a member of ``queue``: ``@app.workflow(queue=...)``) in the durable queue:
        a child offered to its gate, whose controls are the queue's. Wait for it with ``wait_child``."""
        return await self.start_child(workflow, payload, gate=True, queue=queue)

    @abc.abstractmethod
    async def wait_child(self, handle: ChildHandle) -> Any:
        """The child's result; its failure raised as ``RunFailed`` / ``RunCancelled``."""

    @abc.abstractmethod
    async def publish(self, event: Any, key: Any = None, payload: Any = None) -> str:
        """Publish a declared domain event (``app.event``) once: journaled, a replay does not publish again.

        Its id; triggers start their workflows from it and ``cancel_on`` declarations see it.
        """

    async def wait_for_event(
        self, event: Any, *, match: Any = None, timeout: Duration | None = None, lookback: Duration | None = None
    ) -> Any:
        """The first published event (a declared one, or any of a list) that ``match`` accepts, as ``lg.Event``;
        ``None`` when ``timeout`` passes first. Satisfied by events from ``lookback`` before the call (default:
        since the run started; ``0``: only from now); each wait consumes one event; the run parks meanwhile."""
        raise NotImplementedError

    async def create_token(
        self,
        name: str,
        *,
        model: type[BaseModel] | None = None,
        timeout: Duration | None = None,
        single_use: bool = True,
    ) -> Any:
        """A new ``lg.CallbackToken`` for this run (journaled: a replay returns the same one). Whoever holds its
        secret completes it (``POST /callbacks/{token}``, ``client.complete_token``) with a payload ``model``
        validates; after ``timeout`` it expires. See docs/human-in-the-loop.md."""
        raise NotImplementedError

    async def wait_for_token(self, token: Any) -> Any:
        """The payload ``token`` is completed with (the run parks meanwhile, before or after it comes);
        ``lg.TokenRejected`` when it is rejected, ``lg.TokenExpired`` once its timeout passes first."""
        raise NotImplementedError

    async def rate_limit(
        self, name: str, *, limit: int, period: Duration, key: Any = None, cost: int | None = None
    ) -> None:
        """Wait durably for a slot of the sliding window ``name`` (``limit`` per ``period``, per ``key``),
        shared by every run that uses it; journaled, so a replay does not take a second slot. With
        ``cost`` the window counts units: the call reserves ``cost`` of the ``limit``."""
        raise NotImplementedError

    def settle(self, units: int) -> None:
        """Inside a step under a weighted flow key: the units its call really used (e.g. the provider's
        reported usage), counted in the key's window in its reservation's place when the attempt ends."""
        raise NotImplementedError

    def compensations(self) -> Compensations:
        """``async with ctx.compensations() as undo:`` -- ``undo.add(name, fn, *args, retry=, **kwargs)`` as each
        step succeeds; if the block raises (or the run is cancelled with ``compensate=True``), the compensations
        run as journaled steps in reverse order, each once, then the error goes on. One that fails after its
        retries suspends the run (``CompensationFailed``, both errors kept)."""
        return Compensations(self.step, contextlib.nullcontext, lambda: None)

    async def stream(self, chunk: Any, *, topic: str = "default") -> None:
        """Append ``chunk`` (a JSON value or a string) to the run's stream ``topic``, for readers to follow live.

        Numbered per run and topic; committed with the group commit. Inside a step, a chunk names
        the step and attempt; a failed attempt is followed by a ``reset`` so readers drop its chunks.
        ``StreamLimitExceeded`` past the run's cap. See docs/streams.md."""
        raise NotImplementedError

    @abc.abstractmethod
    def patch(self, marker: str) -> bool:
        """Whether this run was stamped with the patch ``marker`` when it started."""

    @abc.abstractmethod
    async def now(self) -> datetime:
        """The current time, journaled: a replay sees the same instant."""

    @abc.abstractmethod
    async def uuid(self) -> str:
        """A random UUID, journaled."""

    @abc.abstractmethod
    async def random(self) -> float:
        """A random float in [0, 1), journaled."""

    @property
    def subject(self) -> Subject:
        """Who started the run (identity only; ``SYSTEM_SUBJECT`` when nobody was recorded)."""
        return SYSTEM_SUBJECT

    @property
    def scopes(self) -> frozenset[str]:
        """What the starter may do on this attempt (``Engine(resolve_scopes=...)``, asked again each attempt)."""
        return frozenset()

    @property
    def flow_control(self) -> Any:
        """The step flow control in force: inside a step, its key's current limits; ``None`` when none applies."""
        return None
