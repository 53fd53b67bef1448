"""The narrow seam the gate, the drainer and the sweeps receive instead of the engine.

``Runtime`` is what any process that starts runs offers the gate: the store, the clock,
the workflow definitions, the pause snapshot, how a new run's row is built, and the few
callbacks a decision calls back into (wake local workers, react to a decision, stop
evicted runs). ``WorkerRuntime`` adds what a process that executes runs offers its loops
(the drainer, the sweeps): who it is, its lease, whether it is still running, and where a
loop reports a store failure. Both are frozen: reading a field is an attribute read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from ..app import App
from ..clock import Clock
from ..crypto import Keyring
from ..definitions import WorkflowDef
from ..handles import Waiter
from ..store import Store
from ..store.base import Row
from .pipeline import Decision

__all__ = ["NewRunRow", "Pauses", "Published", "Runtime", "WorkerRuntime"]


class Pauses(Protocol):
    """The active pauses as this process last read them (at most a second ago)."""

    async def snapshot(self) -> dict[str, Row]:
        """Active pauses by scope (``wf:<name>``, ``key:<key>``)."""
        ...

    async def refresh(self) -> None:
        """Read the pauses again now."""
        ...

    async def paused(self, workflow: str) -> bool:
        """Whether ``workflow`` is paused."""
        ...


class NewRunRow(Protocol):
    """Builds the row a new run of ``defn`` is inserted as (``payload``: a model or its JSON)."""

    def __call__(
        self,
        defn: WorkflowDef,
        payload: BaseModel | str,
        *,
        run_id: str | None = None,
        identity: str | None = None,
        idempotency_key: str | None = None,
        ticket: str | None = None,
    ) -> dict[str, Any]: ...


class Published:
    """Who to tell at once when this process publishes a domain event (the event sweeps tick then)."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []

    def listen(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def __call__(self) -> None:
        for listener in self._listeners:
            listener()


@dataclass(frozen=True, slots=True)
class Runtime:
    """What the gate's admission and the drainer decide with, and call back into."""

    app: App
    """The workflow definitions (``app.get(name)``, ``app.definitions()``)."""
    store: Store
    clock: Clock
    poll_interval: float
    pauses: Pauses
    new_run_row: NewRunRow
    created_here: Callable[[Row, float], None]
    """A start made here created this run row at ``now`` (a blocking start may execute it as inserted)."""
    wake: Callable[[float | None], None]
    """A run is runnable from ``at`` (``None``: anything may have changed, the gate too)."""
    after_decision: Callable[[WorkflowDef, Decision], None]
    """React to a gate decision: wake workers, stop evicted incumbents, settle parked waiters."""
    stopped: Callable[[list[str], str], None]
    """Runs ended from outside: stop any local execution and release their result waiters."""
    waiter: Waiter
    """What a ``RunHandle`` waits for its run with."""
    published: Published = field(default_factory=Published)
    """Called when this process publishes a domain event; the event sweeps listen to it."""
    keyring: Keyring = field(default_factory=Keyring)
    """The keys that open what encrypted runs sealed (an event's data, for the event sweeps)."""


@dataclass(frozen=True, slots=True)
class WorkerRuntime:
    """What a process that executes runs offers its loops (the drainer, the sweeps)."""

    runtime: Runtime
    worker_id: str
    lease: float
    """Seconds a lease (a run's, a sweep's) lasts unless renewed."""
    running: Callable[[], bool]
    """Whether the loops should keep going (false once the engine began to close)."""
    store_failed: Callable[[str, BaseException], None]
    """A loop's store call failed (an outage is logged once, when it begins)."""
    store_recovered: Callable[[], None]
    """A loop's store call succeeded (the end of a logged outage is logged)."""
