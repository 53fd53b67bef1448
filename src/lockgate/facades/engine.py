"""``Engine``: the facade of a process that executes runs and runs the sweeps.

An engine has a ``Client`` (every start, signal, read and recovery verb is the client's)
and a ``Dispatcher`` that claims runnable runs and executes them; both are built on one
``Core``. The engine starts the sweeps beside the dispatcher's loops.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from pydantic import BaseModel

from ..app import App
from ..callbacks import check_base_url
from ..clock import Clock
from ..crypto import Keyring
from ..definitions import WorkflowDef
from ..durations import Duration, to_seconds
from ..engine.core import Core, WorkflowRef
from ..engine.dispatcher import Dispatcher
from ..engine.durable import Running
from ..engine.firing import Fired, ScheduleRuntime
from ..engine.identity import ScopeResolver
from ..engine.schedule_chain import ScheduleChain
from ..engine.schedules import BackfillSlot
from ..engine.shutdown import Shutdown
from ..errors import InvalidArgument
from ..events import DeliveryRecord, EventDef, EventRecord, Subject
from ..gate.drainer import Drainer
from ..gate.handoff import HandOff, Passed
from ..gate.pipeline import Decision
from ..gate.runtime import Runtime, WorkerRuntime
from ..handles import RunHandle
from ..history import partition_interval
from ..ids import new_id
from ..inspect import FiringInfo, FlowKeyRow, FlowRow, Inspector, ScheduleInfo, Trace
from ..queues import Queue
from ..recording import DEFAULT_INPUT_LIMIT, REPLAY_SHAPE_LIMIT
from ..records import AttemptInfo, EventInfo, RunInfo, StepInfo
from ..routing import Labels, Selection
from ..store import Store
from ..store.base import Row
from ..streams import StreamChunk, StreamLimits
from ..sweeps import SweepSettings, start_sweeps
from .client import DEFAULT_STORE, Client
from .operator import BulkResult

__all__ = ["MIN_RETENTION", "Engine"]

MIN_RETENTION = 60.0
"""Seconds: a shorter retention would delete runs before their callers have read their results."""


class Engine:
    """Runs workflows from ``store``: ``async with Engine(app) as engine: ...``.

    ``lease`` bounds how long a run held by a dead process waits before another takes
    it; ``inline_sleep`` is the longest timer a body waits for in place instead of
    parking; ``stall_after`` is the staleness threshold (per workflow: ``stall_after=``).
    ``step_threads``: how many plain ``def`` steps run at once (threads; default
    ``max_concurrent_runs``). ``public_url``: the base of callback tokens' URLs (default
    ``LOCKGATE_PUBLIC_URL``; docs/human-in-the-loop.md). ``retention``: runs that ended longer ago are
    deleted with their records, and so are ledger rows that old (``flow()``'s counts stay); ``None`` keeps everything.
    ``history_partition``: what one partition of the run history spans on PostgreSQL (``hour``, ``day``,
    ``week``; docs/history.md).
    """

    def __init__(
        self,
        app: App,
        store: str | Store = DEFAULT_STORE,
        *,
        max_concurrent_runs: int = 200,
        lease: Duration = "15s",
        poll_interval: Duration = "500ms",
        inline_sleep: Duration = "1s",
        stall_after: Duration = "30m",
        retention: Duration | None = "30d",
        event_retention: Duration | None = "30d",
        delivery_retention: Duration | None = "30d",
        resolve_scopes: ScopeResolver | None = None,
        max_reclaims: int = 3,
        recording: str = "full",
        clock: Clock | None = None,
        worker_id: str | None = None,
        encryption_keys: str | Sequence[str] | None = None,
        step_input_limit: int = DEFAULT_INPUT_LIMIT,
        replay_shape_limit: int = REPLAY_SHAPE_LIMIT,
        step_threads: int | None = None,
        public_url: str | None = None,
        stream_limits: StreamLimits | None = None,
        labels: Labels | Mapping[str, str] | str | None = None,
        workflows: str | Sequence[str] | None = None,
        exclude: str | Sequence[str] | None = None,
        unroutable_after: Duration = "1m",
        history_partition: str | None = None,
    ) -> None:
        self.client = Client(
            app,
            store,
            clock=clock,
            poll_interval=to_seconds(poll_interval, what="poll_interval"),
            recording=recording,
            encryption_keys=encryption_keys,
            step_input_limit=step_input_limit,
        )
        if max_concurrent_runs < 1:
            raise ValueError("max_concurrent_runs must be >= 1")
        if max_reclaims < 1:
            raise ValueError("max_reclaims must be >= 1")
        if isinstance(replay_shape_limit, bool) or not isinstance(replay_shape_limit, int) or replay_shape_limit < 0:
            raise InvalidArgument(f"replay_shape_limit must be a whole number >= 0, got {replay_shape_limit!r}")
        if step_threads is not None and not 1 <= step_threads <= 10_000:
            raise ValueError(f"step_threads must be between 1 and 10000, got {step_threads!r}")
        self.max_concurrent_runs = max_concurrent_runs
        if stream_limits is not None:  # the most one run may stream (ctx.stream; docs/streams.md)
            self.client.core.streams.limits = stream_limits
        self.selection = Selection.of(labels, workflows, exclude)  # checked against the app as it opens
        self.unroutable_after = to_seconds(unroutable_after, what="unroutable_after")
        self.client.core.unroutable_after = self.unroutable_after  # what cluster status and /metrics report
        self.lease = to_seconds(lease, what="lease")
        if self.lease < 0.5:
            raise ValueError("lease must be at least 500ms")
        self.client.core.store.fit_lease(self.lease)  # a partitioned database noticed within about one lease
        self.inline_sleep = to_seconds(inline_sleep, what="inline_sleep")
        self.stall_after = to_seconds(stall_after, what="stall_after")
        self.retention = None if retention is None else to_seconds(retention, what="retention")
        if self.retention is not None and self.retention < MIN_RETENTION:
            raise ValueError(f"retention must be at least 1m (or None to keep everything), got {retention!r}")
        self.history_partition = partition_interval(history_partition, self.retention)
        self.max_reclaims = max_reclaims
        # Domain events and deliveries (sweeps/retention.py); the delivery TTL is a custom key's dedupe window.
        self.event_retention = None if event_retention is None else to_seconds(event_retention, what="event_retention")
        self.delivery_retention = (
            None if delivery_retention is None else to_seconds(delivery_retention, what="delivery_retention")
        )
        self.client.source = "api"  # a start or publish made through an engine, unless told otherwise (origin.py)
        self.worker_id = worker_id or new_id("wkr")
        self.client.schedule_owner = self.worker_id
        self.schedules = self.client.schedules
        """Runtime schedules (``Client.schedules``)."""
        self.host = socket.gethostname()
        if public_url is not None:  # where callback tokens' URLs point; else LOCKGATE_PUBLIC_URL
            self.client.core.public_url = check_base_url(public_url)
        self.dispatcher = Dispatcher(
            self.client.core,
            max_concurrent_runs=max_concurrent_runs,
            lease=self.lease,
            inline_sleep=self.inline_sleep,
            max_reclaims=max_reclaims,
            worker_id=self.worker_id,
            host=self.host,
            resolve_scopes=resolve_scopes,
            replay_shape_limit=replay_shape_limit,
            step_threads=step_threads,
            selection=self.selection,
        )

    @property
    def core(self) -> Core:
        """The state this engine's client and dispatcher share."""
        return self.client.core

    @property
    def runtime(self) -> Runtime:
        """The seam the gate decides with (its callbacks reach this engine's dispatcher)."""
        return self.client.core.runtime

    @property
    def worker(self) -> WorkerRuntime:
        """The seam the drainer and the sweeps receive."""
        return self.dispatcher.worker

    @property
    def sweep_settings(self) -> SweepSettings:
        """What the sweeps are started with (``stall_after``, ``retention``)."""
        return SweepSettings(
            stall_after=self.stall_after,
            retention=self.retention,
            event_retention=self.event_retention,
            delivery_retention=self.delivery_retention,
            unroutable_after=self.unroutable_after,
            history_partition=self.history_partition,
        )

    @property
    def drainer(self) -> Drainer:
        return self.dispatcher.drainer

    @property
    def app(self) -> App:
        return self.client.core.app

    @property
    def store(self) -> Store:
        return self.client.core.store

    @property
    def clock(self) -> Clock:
        return self.client.core.clock

    @property
    def inspector(self) -> Inspector:
        """The read side over this engine's store, definitions, clock and keys."""
        return self.client.inspector

    @property
    def keyring(self) -> Keyring:
        """The encryption keys, newest first (``encryption_keys`` or ``LOCKGATE_ENCRYPTION_KEYS``)."""
        return self.client.core.keyring

    @property
    def poll_interval(self) -> float:
        """Seconds between reads of what no wake-up tells this process about (another process's work)."""
        return self.client.core.poll_interval

    @property
    def recording(self) -> str:
        return self.client.core.recording

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Validate the definitions, connect, migrate; then register and start the loops and the sweeps."""
        await self.client.open()
        try:
            await self.dispatcher.open()
        except BaseException:  # refused at boot (an unknown --workflows name): nothing left open behind it
            await self.client.close()
            raise
        self.dispatcher.adopt(start_sweeps(self.dispatcher.worker, self.sweep_settings))
        # a schedule's next buffered firing starts as its run ends here, not at the sweep's next tick
        chain = ScheduleChain(ScheduleRuntime(self.runtime, self.worker_id))
        self.core.run_ended = chain.ended
        self.dispatcher.adopt([asyncio.create_task(chain.loop(), name="lockgate-schedule-chain")])

    async def close(self, *, grace: Duration = 0) -> Shutdown:
        """Stop the loops and the runs executing here (they are released for others), then disconnect.

        With ``grace``, first stop claiming and let the step attempts running here finish, up to that
        long, so that what they did is journaled (``lockgate serve --grace``); what it did is returned.
        """
        shutdown = await self.dispatcher.close(to_seconds(grace, what="grace"))
        await self.client.close()
        return shutdown

    # -- the dispatcher's side ------------------------------------------------------------

    def wake(self, at: float | None = None) -> None:
        """``wake(at)``: a run is runnable from ``at``; ``wake()``: anything may have changed (the gate too)."""
        self.dispatcher.wake(at)

    def after_finish(self, run_id: str, stopped: list[str], ended: Row | None = None, *, settled: bool = False) -> None:
        """``settled``: the run's slot passed on in its end's transaction, and nothing is left to drain for it."""
        self.dispatcher.after_finish(run_id, stopped, ended, settled=settled)

    async def hand_off(self, defn: WorkflowDef, row: Row, status: str) -> HandOff | None:
        """Where the slot of the run ``row`` goes as it ends with ``status`` (``gate/handoff.py``)."""
        return await self.dispatcher.hand_off(defn, row, status)

    def passed(self, passed: Passed) -> None:
        """A run's end passed its slot on: execute the run claimed for this worker; wake others for the rest."""
        self.dispatcher.passed(passed)

    def after_decision(self, defn: WorkflowDef, decision: Decision) -> None:
        """React to a gate decision: wake workers and the drainer, stop evicted incumbents."""
        self.dispatcher.after_decision(defn, decision)

    def new_run_row(self, defn: WorkflowDef, payload: Any, **kwargs: Any) -> dict[str, Any]:
        """The row a new run of ``defn`` is inserted as (a blocking start's own is claimed here)."""
        return self.dispatcher.new_run_row(defn, payload, **kwargs)

    def created_here(self, created: Row, now: float) -> None:
        self.dispatcher.created_here(created, now)

    def stopped(self, run_ids: list[str], reason: str) -> None:
        """Runs ended from outside: stop their executions here and release their result waiters."""
        self.dispatcher.stopped(run_ids, reason)

    def on_step_error(self, execution: Running, step_key: str, error: BaseException) -> None:
        """A step error that carries ``retry_after`` pauses the run's flow-control keys until then."""
        self.dispatcher.on_step_error(execution, step_key, error)

    def store_failed(self, where: str, exc: BaseException) -> None:
        """A loop's store call failed: an outage is logged once, when it begins; anything else each time."""
        self.dispatcher.store_failed(where, exc)

    def store_recovered(self) -> None:
        """A loop's store call succeeded: if an outage was logged, log its end."""
        self.dispatcher.store_recovered()

    @property
    def running(self) -> bool:
        """Whether the engine's loops should keep going (false once ``close`` began)."""
        return self.dispatcher.is_running()

    @property
    def executing(self) -> list[str]:
        """Ids of the runs this process has claimed and is executing now."""
        return list(self.dispatcher.inflight)

    @property
    def claiming(self) -> bool:
        """Whether a claimed run has not reached its body yet."""
        return self.dispatcher.claiming

    # -- the client's verbs ---------------------------------------------------------------

    async def enqueue(
        self, queue: Queue | str, workflow: WorkflowRef, payload: Any = None, *, idempotency_key: str | None = None
    ) -> RunHandle:
        """Put ``workflow`` in the durable ``queue`` it belongs to: a ``start`` its gate decides."""
        return await self.client.enqueue(queue, workflow, payload, idempotency_key=idempotency_key)

    async def start(
        self,
        workflow: WorkflowRef,
        payload: Any = None,
        *,
        at: datetime | None = None,
        wait: bool = False,
        idempotency_key: str | None = None,
        flow_control: Any = None,
        timeout: float | None = None,
        subject: Subject | None = None,
        trace_id: str | None = None,
        conn: Any = None,
    ) -> RunHandle:
        """Offer a start to the gate; the handle says what became of it (``conn``: see ``Client.start``)."""
        return await self.client.start(
            workflow,
            payload,
            at=at,
            wait=wait,
            idempotency_key=idempotency_key,
            flow_control=flow_control,
            timeout=timeout,
            subject=subject,
            trace_id=trace_id,
            conn=conn,
        )

    async def run(
        self,
        workflow: WorkflowRef,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        flow_control: Any = None,
    ) -> Any:
        """Start and wait: the run's result, or its failure raised."""
        return await self.client.run(
            workflow, payload, idempotency_key=idempotency_key, timeout=timeout, flow_control=flow_control
        )

    async def admitted_run(self, ticket: str, timeout: float | None = None) -> str:
        """The id of the run the start ``ticket`` made or joined, once the gate admits it."""
        return await self.client.admitted_run(ticket, timeout)

    async def result(self, run_id: str, timeout: float | None = None) -> Any:
        """The run's result once it ends; ``RunFailed`` / ``RunCancelled`` if it did not succeed."""
        return await self.client.result(run_id, timeout)

    def notify_finished(self, run_id: str, ended: dict[str, Any] | None = None) -> None:
        """Wake those waiting for ``run_id``; ``ended`` is its final row if this process ended it."""
        self.client.notify_finished(run_id, ended)

    def message_settled(self, message_id: str) -> None:
        self.client.message_settled(message_id)

    def identity_key(self, defn: WorkflowDef, payload: BaseModel, given: str | None) -> str | None:
        """The idempotency key of a start: the caller's, else the workflow's callback."""
        return self.client.identity_key(defn, payload, given)

    async def get_run(self, run_id: str) -> RunInfo:
        """One run (``UnknownRun`` if there is none)."""
        return await self.client.get_run(run_id)

    def stream(self, run_id: str, topic: str = "default", *, after: int = 0) -> AsyncIterator[StreamChunk]:
        """The run's stream ``topic``, live (``Client.stream``)."""
        return self.client.stream(run_id, topic, after=after)

    async def stream_token(self, run_id: str, *, ttl: Duration = "15m", topics: Sequence[str] | None = None) -> str:
        """A browser-scoped token reading the run's stream (``Client.stream_token``)."""
        return await self.client.stream_token(run_id, ttl=ttl, topics=topics)

    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        statuses: Sequence[str] = (),
        parent_id: str | None = None,
        source: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        id_prefix: str | None = None,
        text: str | None = None,
        dead_letter: bool = False,
        cursor: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[RunInfo]:
        """Runs matching every filter given, newest first (``Client.list_runs``)."""
        return await self.client.list_runs(
            workflow=workflow,
            status=status,
            statuses=statuses,
            parent_id=parent_id,
            source=source,
            since=since,
            until=until,
            id_prefix=id_prefix,
            text=text,
            dead_letter=dead_letter,
            cursor=cursor,
            limit=limit,
            offset=offset,
        )

    async def steps(self, run_id: str) -> list[StepInfo]:
        """The run's journal, in the order its body reached each entry."""
        return await self.client.steps(run_id)

    async def attempts(self, run_id: str) -> list[AttemptInfo]:
        return await self.client.attempts(run_id)

    async def events(self, run_id: str) -> list[EventInfo]:
        """The run's lifecycle events, oldest first."""
        return await self.client.events(run_id)

    async def publish(
        self,
        event: EventDef | str,
        key: Any = None,
        payload: Any = None,
        *,
        trace_id: str | None = None,
        subject: Subject | None = None,
        conn: Any = None,
    ) -> str:
        """Publish a declared domain event; its id (``Client.publish``; ``conn``: the caller's transaction)."""
        return await self.client.publish(event, key, payload, trace_id=trace_id, subject=subject, conn=conn)

    async def list_events(
        self, *, name: str | None = None, since: datetime | None = None, limit: int = 50
    ) -> list[EventRecord]:
        """Published events, newest first."""
        return await self.client.list_events(name=name, since=since, limit=limit)

    async def get_event(self, event_id: str) -> EventRecord:
        """One published event."""
        return await self.client.get_event(event_id)

    async def deliveries(self, event_id: str) -> list[DeliveryRecord]:
        """What became of ``event_id`` for each trigger listening for it."""
        return await self.client.deliveries(event_id)

    async def replay_events(self, event: str, **options: Any) -> list[Any]:
        """``Client.replay_events``: offer past events to their triggers again (a dry run unless ``commit=True``)."""
        return await self.client.replay_events(event, **options)

    async def signal(self, run_id: str, name: str, payload: Any = None) -> None:
        """Send signal ``name`` to a live run; kept until the body waits for it."""
        await self.client.signal(run_id, name, payload)

    async def update(self, run_id: str, name: str, payload: Any = None, *, timeout: float | None = None) -> Any:
        """Send update ``name`` and wait for the body's handler to answer."""
        return await self.client.update(run_id, name, payload, timeout=timeout)

    async def complete_token(self, token: str, payload: Any = None) -> str:
        """Complete an approval token with ``payload`` (``Client.complete_token``)."""
        return await self.client.complete_token(token, payload)

    async def reject_token(self, token: str, reason: str | None = None) -> str:
        """Complete an approval token with a rejection (``Client.reject_token``)."""
        return await self.client.reject_token(token, reason)

    async def cancel(self, run_id: str, reason: str | None = None, *, compensate: bool = False) -> None:
        """Cancel a running or suspended run (its children follow their parent-close policy);
        ``compensate=True``: its ``ctx.compensations()`` blocks undo what it did first."""
        await self.client.cancel(run_id, reason, compensate=compensate)

    async def suspend(self, run_id: str, reason: str | None = None) -> None:
        """Park a running run until ``resume``; its journal is kept."""
        await self.client.suspend(run_id, reason)

    async def resume(self, run_id: str) -> None:
        """Continue a suspended run: completed steps replay, a failed step runs again."""
        await self.client.resume(run_id)

    async def redrive(self, run_id: str) -> None:
        """Continue a failed run from its journal: completed steps replay, failed ones re-run."""
        await self.client.redrive(run_id)

    async def resume_from_step(self, run_id: str, step: str) -> None:
        """Re-run a failed run from ``step`` (by name, or ``name#n``): earlier steps replay."""
        await self.client.resume_from_step(run_id, step)

    async def discard(self, run_id: str) -> bool:
        """Acknowledge a failed run (it stays failed, but leaves the dead-letter view); ``False`` if it
        already was discarded (an idempotent no-op)."""
        return await self.client.discard(run_id)

    async def retry(self, run_id: str, payload_override: Any = None) -> RunHandle:
        """A fresh run of a failed or cancelled run's workflow (same payload unless overridden)."""
        return await self.client.retry(run_id, payload_override)

    async def migrate_version(
        self,
        run_id: str | None = None,
        *,
        workflow: str | None = None,
        from_version: str | None = None,
        to_version: str,
        commit: bool = False,
        limit: int = 10_000,
    ) -> BulkResult:
        """Declare live runs of an old version safe for the code of ``to_version`` (``Client.migrate_version``)."""
        return await self.client.migrate_version(
            run_id, workflow=workflow, from_version=from_version, to_version=to_version, commit=commit, limit=limit
        )

    async def cancel_many(
        self, *, reason: str, limit: int, workflow: str | None = None, status: str | None = None, commit: bool = False
    ) -> BulkResult:
        """Cancel up to ``limit`` running/suspended runs (a dry run unless ``commit``)."""
        return await self.client.cancel_many(
            reason=reason, limit=limit, workflow=workflow, status=status, commit=commit
        )

    async def replay_many(
        self, *, mode: str, limit: int, workflow: str | None = None, status: str | None = None, commit: bool = False
    ) -> BulkResult:
        """Redrive (failed) or retry (failed, cancelled) up to ``limit`` runs (a dry run unless ``commit``)."""
        return await self.client.replay_many(mode=mode, limit=limit, workflow=workflow, status=status, commit=commit)

    async def paused(self, workflow: str) -> bool:
        """Whether ``workflow`` is paused (cached for a second: a pause reaches every process within that)."""
        return await self.client.paused(workflow)

    async def pause_snapshot(self) -> dict[str, Row]:
        """Active pauses by scope (``wf:<name>``, ``key:<key>``) as last read (at most a second ago)."""
        return await self.client.pause_snapshot()

    async def refresh_pauses(self) -> None:
        await self.client.refresh_pauses()

    async def pause(self, workflow: str, reason: str | None = None) -> None:
        """Park every new start of ``workflow`` (nothing is discarded) until ``unpause``."""
        await self.client.pause(workflow, reason)

    async def unpause(self, workflow: str) -> int:
        """Lift a pause; the starts it collected are re-offered in priority order. How many were parked."""
        return await self.client.unpause(workflow)

    async def pause_key(self, key: str, until: datetime | None = None, reason: str | None = None) -> None:
        """Hold admissions competing under flow-control ``key`` (a concurrency/throttle key or pool) until ``until``."""
        await self.client.pause_key(key, until, reason)

    async def unpause_key(self, key: str) -> bool:
        """Lift the hold on ``key``; whether it was held."""
        return await self.client.unpause_key(key)

    async def cancel_start(self, ticket: str, reason: str) -> int:
        """Cancel a start parked at the gate (with every arrival folded into it); how many arrivals it held."""
        return await self.client.cancel_start(ticket, reason)

    async def set_flow_limits(
        self, key: str, *, rate: int | None = None, period: Duration = "1s", parallelism: int | None = None
    ) -> FlowKeyRow:
        """Set step flow-control ``key``'s limits (whole); waiting steps see them at once."""
        return await self.client.set_flow_limits(key, rate=rate, period=period, parallelism=parallelism)

    async def flow_keys(self, key: str | None = None) -> list[FlowKeyRow]:
        """Step flow-control keys: limits in force, running, waiting, started in the window, oldest waiter."""
        return await self.client.flow_keys(key)

    async def pauses(self) -> list[dict[str, Any]]:
        """Active pauses: workflows (``wf:``) and keys (``key:``)."""
        return await self.client.pauses()

    async def flow(self, workflow: str | None = None, *, since: datetime | None = None) -> list[FlowRow]:
        """Per workflow and key: queued, oldest waiting, in flight, admitted, collapsed, dropped, ..."""
        return await self.client.flow(workflow, since=since)

    async def trace(self, ticket: str) -> Trace:
        """What became of the arrival ``ticket`` (``LockgateError`` for an unknown ticket)."""
        return await self.client.trace(ticket)

    # -- schedules -------------------------------------------------------------------------

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule, declared or stored (orphaned), with its next firing time."""
        return await self.client.list_schedules()

    async def schedule_firings(self, name: str, limit: int = 50) -> list[FiringInfo]:
        """The firing ledger of schedule ``name``, newest first."""
        return await self.client.schedule_firings(name, limit)

    async def pause_schedule(self, name: str, reason: str | None = None) -> None:
        """Stop ``name`` firing on every replica until ``unpause_schedule``."""
        await self.client.pause_schedule(name, reason)

    async def unpause_schedule(self, name: str) -> None:
        """Let ``name`` fire again from its next slot (slots passed while paused are not caught up)."""
        await self.client.unpause_schedule(name)

    async def run_schedule(self, name: str) -> Fired:
        """Fire ``name`` now (a manual firing, recorded in its ledger)."""
        return await self.client.run_schedule(name)

    async def backfill_schedule(
        self, name: str, start: datetime, end: datetime, *, commit: bool = False
    ) -> list[BackfillSlot]:
        """Fire ``name``'s slots between ``start`` and ``end`` not fired yet (a dry run unless ``commit``)."""
        return await self.client.backfill_schedule(name, start, end, commit=commit)
