"""``Core``: what a ``Client`` and an ``Engine`` are both built on.

It holds the store, the clock, the definitions, the result and admission waiters and the
pause snapshot, and it builds the ``Runtime`` seam the gate receives. A process that
executes runs serves it a ``Local`` (the dispatcher): the seam's callbacks then reach it,
so a start made here wakes the local workers and a blocking start may run where it waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel

from ..app import App
from ..callbacks import public_url_from_env
from ..clock import Clock
from ..crypto import Keyring, Sealer, check_keys, is_sealed, seal_payload
from ..definitions import WorkflowDef
from ..errors import ResultTimeout, ResultTypeError, RunCancelled, RunFailed
from ..gate.pipeline import Decision
from ..gate.runtime import Published, Runtime
from ..handles import RunHandle
from ..ids import new_id
from ..observer import Observer, Observers
from ..origin import current_columns
from ..recording import DEFAULT_INPUT_LIMIT
from ..serde import decode_as
from ..store import Store, shared
from ..store.base import CHANGED, Row
from ..streams import StreamChunk
from . import tracing
from .admissions import Admissions
from .events import Claimer
from .leases import ClockWatch
from .metrics import EngineMetrics
from .pauses import PauseCache
from .results import ResultWaiters
from .stream_hub import StreamHub

__all__ = ["Core", "Local", "WorkflowRef"]

WorkflowRef = str | Callable[..., Any]


class Local(Claimer, Protocol):
    """The side of a process that executes runs, as its core calls it (the dispatcher)."""

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

    def wake(self, at: float | None = None) -> None: ...

    def created_here(self, created: Row, now: float) -> None: ...

    def stopped(self, run_ids: list[str], reason: str) -> None: ...

    def after_decision(self, defn: WorkflowDef, decision: Decision) -> None: ...

    def running_here(self, run_id: str) -> bool: ...

    def finishes_here(self, row: Row) -> bool: ...

    async def admit_blocking(
        self,
        workflow: WorkflowRef,
        payload: Any,
        *,
        at: datetime | None,
        idempotency_key: str | None,
        flow_control: Any,
    ) -> RunHandle:
        """A blocking start, executed where it waits when it can."""
        ...


class Core:
    """The state a client and an engine share, and the ``Runtime`` seam built from it."""

    def __init__(
        self,
        app: App,
        store: Store,
        clock: Clock,
        poll_interval: float,
        recording: str,
        keyring: Keyring | None = None,
        input_limit: int = DEFAULT_INPUT_LIMIT,
    ) -> None:
        self.app = app
        self.store = store
        self.clock = clock
        self.poll_interval = poll_interval
        self.unroutable_after = 60.0  # due runs no live worker takes this long are reported (an engine's option)
        self.recording = recording
        self.input_limit = input_limit  # bytes of a step's input= kept on its attempt row
        self.keyring = keyring if keyring is not None else Keyring.load()  # newest first
        self.public_url = public_url_from_env()  # the base of callback tokens' URLs (Engine(public_url=))
        self.results = ResultWaiters(store, lambda: self.poll_interval)
        self.admissions = Admissions(store, lambda: self.poll_interval)
        self.pauses = PauseCache(store, clock)
        self.clock_watch = ClockWatch(store, clock)
        self.streams = StreamHub(store, self.keyring, clock)  # run streams: readers, cap, token secret
        self.settled: dict[str, asyncio.Event] = {}  # update message id -> set when it is answered
        self.is_open = False
        self.local: Local | None = None
        self.source = "client"  # what a start or publish records as its source unless told otherwise (origin.py)
        self.published = Published()
        self.observer: Observer | None = None  # metrics and traces; None: nothing is reported (observer.py)
        self.run_ended: Callable[[Row], None] | None = None  # told each run ended here (engine/schedule_chain.py)
        self._metrics: EngineMetrics | None = None
        self._listening = False
        self.runtime = self._runtime()

    def serve(self, local: Local) -> None:
        """From now on the seam's callbacks reach ``local`` (call before opening)."""
        self.local = local
        self.runtime = self._runtime()

    def _runtime(self) -> Runtime:
        local = self.local
        if local is None:
            return Runtime(
                app=self.app,
                store=self.store,
                clock=self.clock,
                poll_interval=self.poll_interval,
                pauses=self.pauses,
                new_run_row=self.new_run_row,
                created_here=self._created_elsewhere,
                wake=_no_workers,
                after_decision=self.after_decision,
                stopped=self.stopped,
                waiter=self,
                published=self.published,
                keyring=self.keyring,
            )
        return Runtime(
            app=self.app,
            store=self.store,
            clock=self.clock,
            poll_interval=self.poll_interval,
            pauses=self.pauses,
            new_run_row=local.new_run_row,
            created_here=local.created_here,
            wake=local.wake,
            after_decision=local.after_decision,
            stopped=local.stopped,
            waiter=self,
            published=self.published,
            keyring=self.keyring,
        )

    # -- lifecycle ----------------------------------------------------------------------

    def observe(self, observer: Observer) -> None:
        """Report this process's work to ``observer`` too (beside any already attached)."""
        current = self.observer
        if current is None:
            self.observer = observer
        elif isinstance(current, Observers):
            self.observer = Observers(*current.observers, observer)
        else:
            self.observer = Observers(current, observer)
        self.store.observer = self.observer

    def metrics(self) -> EngineMetrics:
        """This process's Prometheus metrics, collected from the first call on (``engine/metrics.py``)."""
        if self._metrics is None:
            self._metrics = EngineMetrics()
            self.observe(self._metrics)
        return self._metrics

    async def open(self) -> None:
        """Validate the definitions, connect, migrate; trace when OpenTelemetry is configured (tracing.py)."""
        check_keys(self.app.definitions(), self.keyring)  # a DefinitionError here refuses the boot
        if tracing.configured() and not _traces(self.observer):
            self.observe(tracing.Tracing())
        await self.store.open()
        await self.clock_watch.read()  # from here on, the database's time (on PostgreSQL)
        self.results.open()
        self.admissions.open()
        if self.store.tells_commits and not self._listening:  # SQLite; PostgreSQL's NOTIFY wakes dispatchers only
            self.store.add_listener(self._heard)
            self._listening = True
        self.is_open = True

    def _hear_ends(self) -> None:
        """Listen for other processes' run ends (PostgreSQL's notifications), from the first wait for one:
        a process that never awaits another's run opens no listening connection for it."""
        self.store.hear_ends()  # first: a listener started below joins the ends' channel at once
        if not self._listening and self.store.cross_process_wakeups:
            self.store.add_listener(self._heard)
            self._listening = True

    def _heard(self, channel: str, payload: str) -> None:
        """Another process committed: whoever waits here on another process's work reads again now."""
        if channel == "ended":  # PostgreSQL: another process ended runs (migration 0056)
            self.results.poke()
            return
        if channel != CHANGED:
            return
        self.results.poke()
        self.admissions.poke()
        self.streams.committed()
        for answered in self.settled.values():
            answered.set()  # the update's caller reads its message again (facades/client.py)

    async def close(self) -> None:
        await self.streams.close()
        await self.admissions.close()
        await self.results.close()
        await self.store.close()
        self.is_open = False

    # -- starts and decisions -----------------------------------------------------------

    def new_run_row(
        self,
        defn: WorkflowDef,
        payload: BaseModel | str,
        *,
        run_id: str | None = None,
        identity: str | None = None,
        idempotency_key: str | None = None,
        ticket: str | None = None,
    ) -> dict[str, Any]:
        """The row a new run of ``defn`` is inserted as (``payload``: a model or its JSON)."""
        rid = run_id or new_id("run")
        text = payload if isinstance(payload, str) else payload.model_dump_json()
        if defn.encrypt_steps:
            text = seal_payload(self.keyring, defn.name, text)
        row = {
            "id": rid,
            "workflow": defn.name,
            "payload": text,
            "identity": identity or (f"{defn.name}\x1f{idempotency_key}" if idempotency_key else rid),
            "idempotency_key": idempotency_key,
            "version": defn.version,
            "patches": defn.patches_json,
            "ticket": ticket or new_id("tkt"),
            "recording": self.recording,
            **current_columns(self.source),  # where the start came from (origin.py)
        }
        if self.observer is not None and row["trace_id"] is None:  # the starter's span, when traced
            row["trace_id"] = self.observer.trace_parent()
        return row

    def after_decision(self, defn: WorkflowDef, decision: Decision) -> None:
        """React to a gate decision: wake workers for a new run, stop evicted incumbents."""
        rt = self.runtime
        if decision.stopped:
            rt.stopped(decision.stopped, "singleton eviction")
        if decision.status == "started":
            rt.wake(None)
            if self.observer is not None:
                self.observer.run_started(defn.name)
        if decision.status != "queued":
            self.admissions.poke()  # a parked start may be what was just decided

    def stopped(self, run_ids: list[str], reason: str) -> None:
        """Runs ended from outside: release their result waiters (a client executes none)."""
        for rid in run_ids:
            self.results.wake(rid, None)

    # -- waiting --------------------------------------------------------------------------

    def notify_finished(self, run_id: str, ended: Row | None = None) -> None:
        """Wake those waiting for ``run_id``; ``ended`` is its final row if this process ended it."""
        self.results.wake(run_id, ended)
        self.streams.ended(run_id)
        if ended is not None and self.run_ended is not None:
            self.run_ended(ended)

    def message_settled(self, message_id: str) -> None:
        event = self.settled.get(message_id)
        if event is not None:
            event.set()

    async def admitted_run(self, ticket: str, timeout: float | None = None) -> str:
        """The id of the run the start ``ticket`` made or joined, once the gate admits it."""
        return await self.admissions.wait(ticket, timeout)

    async def result(self, run_id: str, timeout: float | None = None) -> Any:
        """The run's result once it ends; ``RunFailed`` / ``RunCancelled`` if it did not succeed."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        local = self.local
        results = self.results
        while True:
            ended = results.listen(run_id)  # before the read: a finish during it still wakes us
            try:
                # A run that succeeded here moments ago is known without a read; one running here wakes us.
                row = results.succeeded(run_id)
                if row is None and (local is None or not local.running_here(run_id)):
                    row = await results.look(run_id)
                if row is not None and row["status"] in shared.TERMINAL:
                    return self.outcome(row)
                wait = None if deadline is None else deadline - loop.time()
                if wait is not None and wait <= 0:
                    status = "running" if row is None else row["status"]
                    raise ResultTimeout(f"run {run_id} did not finish within {timeout}s (status {status})")
                # A run that ends here wakes us at once; the bulk poll is for runs other processes end.
                here = row is None or (local is not None and local.finishes_here(row))
                if not here:
                    self._hear_ends()
                results.poll(run_id, self.poll_interval if here else 0.01, elsewhere=not here)
                timer = None if wait is None else loop.call_later(wait, _resolve, ended)
                try:
                    final = await ended  # resolved by the run's end, a poll that saw it end, or the timeout
                finally:
                    if timer is not None:
                        timer.cancel()
                if final is not None and final["status"] in shared.TERMINAL:
                    return self.outcome(final)  # it ended here: its final row is known without a read
            finally:
                results.forget(run_id, ended)

    async def stream(self, run_id: str, topic: str = "default", after: int = 0) -> AsyncIterator[StreamChunk]:
        """The run's stream ``topic`` past seq ``after``, live, until the run ended and all of it was read."""
        async for item in self.streams.read(run_id, topic, after):
            if isinstance(item, StreamChunk):  # not the StreamEnd
                yield item

    def outcome(self, row: Row) -> Any:
        """An ended run's result, or its failure raised."""
        if row["status"] == "succeeded":
            try:
                rtype = self.app.get(row["workflow"]).result_type
            except Exception:
                rtype = None
            output = row["output"]
            if is_sealed(output):
                output = Sealer(self.keyring, row["id"]).open("", "output", output)
            return decode_as(output, rtype, workflow=row["workflow"])
        message = row["error_message"]
        if is_sealed(message):
            message = Sealer(self.keyring, row["id"]).open("", "error", message)
        if row["status"] == "cancelled":
            raise RunCancelled(row["id"], message)
        cause = ResultTypeError.from_message(message) if row["error_tag"] == "ResultTypeError" else None
        raise RunFailed(row["id"], row["error_tag"], message) from cause

    def _created_elsewhere(self, created: Row, now: float) -> None:
        """A client executes nothing: where a run it created is executed is not its business."""
        if self.observer is not None:
            self.observer.run_started(created["workflow"])


def _no_workers(at: float | None = None) -> None:
    """A client has no local workers to wake."""


def _traces(observer: Observer | None) -> bool:
    """Whether ``observer`` already includes a ``Tracing``."""
    found = observer.observers if isinstance(observer, Observers) else (observer,)
    return any(isinstance(o, tracing.Tracing) for o in found)


def _resolve(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_result(None)
