"""What a process reports as it works: the hook its metrics and traces attach to.

An engine (or client) holds ``observer: Observer | None``; nothing is reported, and nothing
is paid beyond a ``None`` test, while it is ``None``. ``Observers`` fans one report out to
several (metrics and traces together). Times are the process's own (``perf_counter``), not
the engine's clock: they measure work, not the workflow's time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Observer", "Observers", "RunOutcome"]


@dataclass
class RunOutcome:
    """How one run attempt ended, set by the execution before its ``run_attempt`` block exits.

    ``succeeded``, ``failed``, ``suspended``, ``parked`` (waits on the outside world), or
    ``stopped`` (cancelled, lease lost, shutdown, store failure).
    """

    value: str = "stopped"


class Observer:
    """The reports; every method does nothing here, a subclass overrides those it needs."""

    def run_started(self, workflow: str) -> None:
        """The gate started a run of ``workflow`` in this process (a start, a drained start, a handed-off slot)."""

    @contextlib.contextmanager
    def run_attempt(self, row: Mapping[str, Any], outcome: RunOutcome) -> Iterator[None]:
        """Around one entry into a run's body (``row``: the claimed run); ``outcome`` is set before it exits."""
        yield

    @contextlib.contextmanager
    def step_attempt(self, workflow: str, run_id: str, step: str, attempt: int) -> Iterator[None]:
        """Around one attempt of ``ctx.step``'s function; an exception out of it is the attempt's error."""
        yield

    def run_ended(self, workflow: str, status: str) -> None:
        """A run executing here ended (``succeeded``, ``failed``, ``suspended``)."""

    def lease_takeover(self, workflow: str) -> None:
        """This process claimed a run whose previous entry had not finished (its holder died or let go)."""

    def committed(self, size: int) -> None:
        """The store committed a group of ``size`` write operations."""

    def store_error(self, where: str) -> None:
        """A store ``read`` or ``commit`` failed (the store was unreachable or refused)."""

    def commit_stalled(self) -> None:
        """A commit has waited past ``STALLED`` seconds (a blocked server, a missing synchronous standby)."""

    def trace_parent(self) -> str | None:
        """The trace context a start made now records as its ``trace_id`` (W3C ``traceparent``), if any."""
        return None


class Observers(Observer):
    """Several observers, each told everything in turn."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers

    def run_started(self, workflow: str) -> None:
        for o in self.observers:
            o.run_started(workflow)

    @contextlib.contextmanager
    def run_attempt(self, row: Mapping[str, Any], outcome: RunOutcome) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for o in self.observers:
                stack.enter_context(o.run_attempt(row, outcome))
            yield

    @contextlib.contextmanager
    def step_attempt(self, workflow: str, run_id: str, step: str, attempt: int) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for o in self.observers:
                stack.enter_context(o.step_attempt(workflow, run_id, step, attempt))
            yield

    def run_ended(self, workflow: str, status: str) -> None:
        for o in self.observers:
            o.run_ended(workflow, status)

    def lease_takeover(self, workflow: str) -> None:
        for o in self.observers:
            o.lease_takeover(workflow)

    def committed(self, size: int) -> None:
        for o in self.observers:
            o.committed(size)

    def store_error(self, where: str) -> None:
        for o in self.observers:
            o.store_error(where)

    def commit_stalled(self) -> None:
        for o in self.observers:
            o.commit_stalled()

    def trace_parent(self) -> str | None:
        for o in self.observers:
            found = o.trace_parent()
            if found is not None:
                return found
        return None
