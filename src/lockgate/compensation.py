"""Compensation: ``async with ctx.compensations() as undo:``.

As each step of the block succeeds, the body registers what undoes it
(``undo.add("release-flight", release_flight, booking_id)``). If the block raises, or the run
is cancelled with ``compensate=True``, the registered compensations run in reverse order, each
a journaled step with its own retry policy: a replay returns what a completed compensation
recorded instead of running it again. Then the block's error goes on (a cancel ends the run
cancelled). A compensation that fails after its retries raises ``CompensationFailed``, which
suspends the run with both errors.

A compensating cancel reaches the body as ``CancelRequested`` at its next operation that the
journal has no record of (a new step, a wait that would block): what the body completed before
stays done, and the blocks still open undo it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from .definitions import Retry
from .errors import CompensationClosed, CompensationFailed, InvalidArgument, StepFailed

__all__ = ["CancelRequested", "Compensations", "cancel_stop_reason", "requested_cancel"]

_STOP_PREFIX = "cancel requested: "


class CancelRequested(BaseException):
    """The run was cancelled with ``compensate=True``: raised at the body's next new operation.

    A ``BaseException``, so a body's ``except Exception:`` does not swallow it; the blocks of
    ``ctx.compensations()`` it passes through run their compensations, and the run ends
    ``cancelled``.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def cancel_stop_reason(reason: str) -> str:
    """What a compensating cancel tells an execution of the run in this process (``Execution.stop``)."""
    return f"{_STOP_PREFIX}{reason}"


def requested_cancel(stop_reason: str) -> str | None:
    """The cancel's reason when ``stop_reason`` is a compensating cancel's, else ``None``."""
    return stop_reason[len(_STOP_PREFIX) :] if stop_reason.startswith(_STOP_PREFIX) else None


Step = Callable[..., Awaitable[Any]]


class Compensations:
    """The registry of one ``ctx.compensations()`` block; ``undo.add`` while it is open."""

    __slots__ = ("_cancel_pending", "_registered", "_state", "_step", "_undoing")

    def __init__(
        self,
        step: Step,
        undoing: Callable[[], AbstractContextManager[None]],
        cancel_pending: Callable[[], str | None],
    ) -> None:
        self._step = step
        self._undoing = undoing
        self._cancel_pending = cancel_pending
        self._registered: list[tuple[str, Callable[..., Any], tuple[Any, ...], dict[str, Any], Retry | None]] = []
        self._state = "was not entered"

    def add(self, name: str, fn: Callable[..., Any], *args: Any, retry: Retry | None = None, **kwargs: Any) -> None:
        """Register ``fn(*args, **kwargs)`` as the undo of what just succeeded, journaled as step ``name``."""
        if self._state != "open":
            raise CompensationClosed(name, self._state)
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"undo.add(name=...): a compensation's name must be a non-empty string, got {name!r}")
        if not callable(fn):
            raise InvalidArgument(f"undo.add({name!r}, fn): fn must be callable, got {type(fn).__name__}")
        if retry is not None and not isinstance(retry, Retry):
            raise InvalidArgument(f"undo.add({name!r}, retry=...): an lg.Retry, got {type(retry).__name__}")
        self._registered.append((name, fn, args, kwargs, retry))

    @property
    def registered(self) -> list[str]:
        """The names registered so far, in order (they run in reverse)."""
        return [name for name, *_ in self._registered]

    async def __aenter__(self) -> Compensations:
        if self._state != "was not entered":
            raise InvalidArgument("a ctx.compensations() block is entered once; call ctx.compensations() again")
        self._state = "open"
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:  # never swallows the block's error: mypy sees a 'return' inside it as final
        self._state = "has exited"
        if exc is None:
            reason = self._cancel_pending()
            if reason is None:
                return
            cause: BaseException = CancelRequested(reason)
        elif isinstance(exc, CompensationFailed):  # an inner block's undo stopped half done: the run is suspended
            return  # and this block's compensations, registered before, wait for it (reverse order)
        elif isinstance(exc, Exception | CancelRequested):
            cause = exc
        else:  # parked, stopped, lease lost: the body is entered again later and comes back here
            return
        await self._run(cause)
        if exc is None:
            raise cause
        # the block's own error goes on

    async def _run(self, cause: BaseException) -> None:
        with self._undoing():
            for name, fn, args, kwargs, retry in reversed(self._registered):
                try:
                    await self._step(name, fn, *args, retry=retry, **kwargs)
                except Exception as failure:
                    raise _failed(name, failure, cause) from failure


def _failed(name: str, failure: Exception, cause: BaseException) -> CompensationFailed:
    if isinstance(failure, StepFailed):
        tag, message = failure.error_tag, failure.error_message
        message = f"{message} (after {failure.attempts} attempt(s))"
    else:
        tag, message = type(failure).__name__, str(failure) or type(failure).__name__
    if isinstance(cause, CancelRequested):
        cause_tag, cause_message = "Cancelled", cause.reason
    elif isinstance(cause, StepFailed):
        cause_tag, cause_message = cause.error_tag, str(cause)
    else:
        cause_tag, cause_message = type(cause).__name__, str(cause) or type(cause).__name__
    return CompensationFailed(name, tag, message, cause_tag, cause_message)
