"""``Client``: start, signal, update, inspect and recover runs; executes nothing.

A web process holds a ``Client``; worker processes hold an ``Engine`` (which has a
``Client`` and also runs bodies and sweeps). Both are built on a ``Core`` and talk to
the store only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from pydantic import BaseModel

from ..app import App
from ..clock import Clock, SystemClock, wait_event
from ..crypto import Keyring, Sealer, is_sealed, open_payload
from ..definitions import WorkflowDef
from ..engine import cancelling, schedules
from ..engine import events as domain_events
from ..engine.core import Core, WorkflowRef
from ..engine.firing import Fired, ScheduleRuntime
from ..errors import InvalidArgument, PayloadError, ResultTimeout, RunNotEligible, UpdateFailed
from ..events import DeliveryRecord, EventDef, EventRecord, Subject
from ..gate.admission import admit, identity_key
from ..gate.joined import admit_within
from ..handles import RunHandle
from ..ids import new_id
from ..inspect.schedules import FiringInfo, ScheduleInfo
from ..origin import current_origin, starting_from
from ..queues import Queue, check_member
from ..recording import DEFAULT_INPUT_LIMIT, check_input_limit, resolve_recording
from ..records import AttemptInfo, EventInfo, RunInfo, StepInfo
from ..serde import import_model, payload_json, validate_payload
from ..store import Store, messages, open_store, runs, shared
from ..store.base import Row
from .callbacks import TokenVerbs
from .operator import BulkResult, OperatorVerbs, bulk, check_reason, statuses
from .schedules_api import Schedules
from .streams_api import StreamVerbs

__all__ = ["DEFAULT_STORE", "Client", "WorkflowRef"]

DEFAULT_STORE = "sqlite:///lockgate.db"


class Client(OperatorVerbs, TokenVerbs, StreamVerbs):
    """Start and manage runs in ``store`` without executing any (``async with`` it)."""

    def __init__(
        self,
        app: App,
        store: str | Store = DEFAULT_STORE,
        *,
        clock: Clock | None = None,
        poll_interval: float = 0.5,
        recording: str = "full",
        encryption_keys: str | Sequence[str] | None = None,
        step_input_limit: int = DEFAULT_INPUT_LIMIT,
    ) -> None:
        recording = resolve_recording(recording)  # LOCKGATE_RECORDING, when set, wins
        check_input_limit(step_input_limit)
        super().__init__(
            Core(
                app,
                open_store(store) if isinstance(store, str) else store,
                clock or SystemClock(),
                poll_interval,
                recording,
                Keyring.load(encryption_keys),  # newest first; LOCKGATE_ENCRYPTION_KEYS when not given
                step_input_limit,
            )
        )
        self.schedule_owner = "client"
        """Recorded on the schedule firings this client claims (an ``Engine`` sets its worker's id)."""
        self.schedules = Schedules(self._schedules)
        """Runtime schedules: create, update, pause, unpause, delete, get, list (``facades/schedules_api.py``)."""

    @property
    def app(self) -> App:
        return self.core.app

    @property
    def keyring(self) -> Keyring:
        """The encryption keys, newest first (``encryption_keys`` or ``LOCKGATE_ENCRYPTION_KEYS``)."""
        return self.core.keyring

    @property
    def store(self) -> Store:
        return self.core.store

    @property
    def clock(self) -> Clock:
        return self.core.clock

    @property
    def poll_interval(self) -> float:
        """Seconds between reads of what this process cannot be told about (another process's work)."""
        return self.core.poll_interval

    @property
    def recording(self) -> str:
        return self.core.recording

    @property
    def source(self) -> str:
        """What a start or publish through this client records as its source (origin.py): ``client``."""
        return self.core.source

    @source.setter
    def source(self, value: str) -> None:
        self.core.source = value

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Validate the definitions, connect, migrate."""
        await self.core.open()

    async def close(self) -> None:
        await self.core.close()

    # -- starting -----------------------------------------------------------------------

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
        return self.core.runtime.new_run_row(
            defn, payload, run_id=run_id, identity=identity, idempotency_key=idempotency_key, ticket=ticket
        )

    def identity_key(self, defn: WorkflowDef, payload: BaseModel, given: str | None) -> str | None:
        """The idempotency key of a start: the caller's, else the workflow's callback."""
        return identity_key(defn, payload, given)

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
        """Offer a start to the gate; the handle says what became of it.

        With ``wait=True`` the call returns once the run has ended (its result via
        ``handle.result()``, or raised when it failed). ``subject`` (the starter's identity,
        never its authority) and ``trace_id`` are recorded with the run (``ctx.subject``).
        ``conn``: the caller's connection (psycopg 3, ``sqlite3``, an SQLAlchemy session or
        connection) inside its open transaction on the store's database; the start is decided
        and written there, and exists if and only if that transaction commits (docs/transactions.md).
        """
        if conn is not None:
            return await self._start_within(conn, workflow, payload, at, wait, idempotency_key, subject, trace_id)
        if subject is None and trace_id is None:  # nearly every start: nothing to record around it
            handle = await self._admit(
                workflow, payload, at=at, wait=wait, idempotency_key=idempotency_key, flow_control=flow_control
            )
        else:
            with self._starting(subject, trace_id):
                handle = await self._admit(
                    workflow, payload, at=at, wait=wait, idempotency_key=idempotency_key, flow_control=flow_control
                )
        if wait and handle.run_id is not None:
            await self.result(handle.run_id, timeout=timeout)
        return handle

    async def enqueue(
        self, queue: Queue | str, workflow: WorkflowRef, payload: Any = None, *, idempotency_key: str | None = None
    ) -> RunHandle:
        """Put ``workflow`` in the durable ``queue`` it is declared in (``@app.workflow(queue=...)``).

        It is ``start``: the queue's controls are the workflow's own, so the gate decides it.
        """
        defn = self.app.get(workflow)
        check_member(defn.name, defn.queue, queue)
        return await self.start(defn.name, payload, idempotency_key=idempotency_key)

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
        # A blocking start (``wait=True`` at the gate), read back once: not via start(), which reads it too.
        handle = await self._admit(
            workflow, payload, at=None, wait=True, idempotency_key=idempotency_key, flow_control=flow_control
        )
        assert handle.run_id is not None
        return await self.result(handle.run_id, timeout=timeout)

    async def _admit(
        self,
        workflow: WorkflowRef,
        payload: Any,
        *,
        at: datetime | None,
        wait: bool,
        idempotency_key: str | None,
        flow_control: Any,
    ) -> RunHandle:
        local = self.core.local
        if wait and local is not None:  # executed where it waits, when this process executes runs
            return await local.admit_blocking(
                workflow, payload, at=at, idempotency_key=idempotency_key, flow_control=flow_control
            )
        return await admit(
            self.core.runtime,
            workflow,
            payload,
            at=at,
            wait=wait,
            idempotency_key=idempotency_key,
            flow_control=flow_control,
        )

    async def _start_within(
        self,
        conn: Any,
        workflow: WorkflowRef,
        payload: Any,
        at: datetime | None,
        wait: bool,
        idempotency_key: str | None,
        subject: Subject | None,
        trace_id: str | None,
    ) -> RunHandle:
        """A start written in the caller's transaction (``gate/joined.py``)."""
        if wait:
            raise InvalidArgument("wait=True cannot be combined with conn=: the run starts only once conn commits")
        with self._starting(subject, trace_id):
            return await admit_within(
                self.core.runtime, conn, workflow, payload, at=at, idempotency_key=idempotency_key
            )

    def _starting(self, subject: Subject | None, trace_id: str | None) -> AbstractContextManager[Any]:
        """Around a start given a starter or a trace id: record them (origin.py)."""
        base = current_origin(self.source)
        who = base.subject if subject is None else subject.to_json()
        return starting_from(base.source, trace_id or base.trace_id, who)

    def wake(self, at: float | None = None) -> None:
        """Tell local workers a run is runnable from ``at`` (no ``at``: re-read everything). A client has none."""
        self.core.runtime.wake(at)

    def created_here(self, created: Row, now: float) -> None:
        """A start this process made created ``created`` at ``now`` (the columns it was inserted with)."""
        self.core.runtime.created_here(created, now)

    # -- results ------------------------------------------------------------------------

    async def admitted_run(self, ticket: str, timeout: float | None = None) -> str:
        """The id of the run the start ``ticket`` made or joined, once the gate admits it.

        For a start the gate parked this waits (up to ``timeout``: ``ResultTimeout``) until
        it is admitted; ``StartNotAdmitted`` if it ends without a run (expired, cancelled,
        dropped when re-offered). ``RunHandle.result()`` of a parked start waits here first.
        """
        return await self.core.admitted_run(ticket, timeout)

    async def result(self, run_id: str, timeout: float | None = None) -> Any:
        """The run's result once it ends; ``RunFailed`` / ``RunCancelled`` if it did not succeed.

        A suspended run is still live: this keeps waiting (up to ``timeout``).
        """
        return await self.core.result(run_id, timeout)

    def notify_finished(self, run_id: str, ended: dict[str, Any] | None = None) -> None:
        """Wake those waiting for ``run_id``; ``ended`` is its final row if this process ended it."""
        self.core.notify_finished(run_id, ended)

    def message_settled(self, message_id: str) -> None:
        self.core.message_settled(message_id)

    # -- reading ------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunInfo:
        """One run (``UnknownRun`` if there is none)."""
        return await self.inspector.run(run_id)

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
        """Runs matching every filter given, newest first (``Inspector.runs``; for the next page's cursor,
        ``client.inspector.run_page``)."""
        return await self.inspector.runs(
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
        return await self.inspector.steps(run_id)

    async def attempts(self, run_id: str) -> list[AttemptInfo]:
        return await self.inspector.attempts(run_id)

    async def events(self, run_id: str) -> list[EventInfo]:
        """The run's lifecycle events, oldest first."""
        return await self.inspector.events(run_id)

    # -- domain events (engine/events.py; read through inspect/events.py) ----------------------

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
        """Publish a declared event (validated first; nothing written if refused); its id. ``conn``: as for
        ``start``, the caller's open transaction it is written in (the triggers fire only if it commits)."""
        origin = current_origin(self.source)
        event_id = await domain_events.publish(
            self.app,
            self.store,
            self.clock,
            event,
            key,
            payload,
            source=origin.source,
            trace_id=trace_id or origin.trace_id,
            subject=subject or Subject.from_json(origin.subject),
            conn=conn,
            local=self.core.local,  # an engine here executes the waiting runs it wakes at once
        )
        if conn is None:  # else the event sweeps find it once it is committed
            self.core.published()
        return event_id

    async def list_events(
        self, *, name: str | None = None, since: datetime | None = None, limit: int = 50
    ) -> list[EventRecord]:
        """Published events, newest first."""
        return await self.inspector.list_events(name=name, since=since, limit=limit)

    async def get_event(self, event_id: str) -> EventRecord:
        """One published event (``InvalidArgument`` if there is none)."""
        return await self.inspector.get_event(event_id)

    async def deliveries(self, event_id: str) -> list[DeliveryRecord]:
        """What became of ``event_id`` for each trigger listening for it."""
        return await self.inspector.deliveries(event_id)

    # -- messages -----------------------------------------------------------------------

    async def signal(self, run_id: str, name: str, payload: Any = None) -> None:
        """Send signal ``name`` to a live run; kept until the body waits for it."""
        row = await self.store.read(shared.get_run, run_id)
        model = self._message_model(row, "signal", name)
        body = payload_json(model, payload, what=f"signal {name!r}")
        mid = new_id("msg")
        if self._sealed(row):
            body = Sealer(self.keyring, run_id).seal(f"msg:{mid}", "payload", body)
        message = {"id": mid, "run_id": run_id, "kind": "signal", "name": name, "payload": body}
        now = self.clock.now()
        await self.store.write(messages.send_message, message, now)
        self.wake(now)

    async def update(self, run_id: str, name: str, payload: Any = None, *, timeout: float | None = None) -> Any:
        """Send update ``name`` and wait for the body's handler to answer.

        Raises ``PayloadError`` when the handler's model rejects the payload and
        ``UpdateFailed`` when the handler raised.
        """
        row = await self.store.read(shared.get_run, run_id)
        model = self._message_model(row, "update", name)
        body = payload_json(model, payload, what=f"update {name!r}")
        mid = new_id("msg")
        if self._sealed(row):
            body = Sealer(self.keyring, run_id).seal(f"msg:{mid}", "payload", body)
        message = {"id": mid, "run_id": run_id, "kind": "update", "name": name, "payload": body}
        now = self.clock.now()
        event = self.core.settled.setdefault(mid, asyncio.Event())
        try:
            await self.store.write(messages.send_message, message, now)
            self.wake(now)
            return await self._await_message(mid, name, run_id, event, timeout)
        finally:
            self.core.settled.pop(mid, None)

    async def _await_message(
        self, mid: str, name: str, run_id: str, event: asyncio.Event, timeout: float | None
    ) -> Any:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        delay, ended = 0.01, ""
        while True:
            msg = await self.store.read(messages.get_message, mid)
            assert msg is not None
            sealed = is_sealed(msg["result"]) or is_sealed(msg["error_message"])
            if sealed and msg["status"] in ("completed", "failed"):
                sealer = Sealer(self.keyring, run_id)
                key = f"msg:{mid}"
                msg = {
                    **msg,
                    "result": sealer.open(key, "result", msg["result"]),
                    "error_message": sealer.open(key, "error", msg["error_message"]),
                }
            if msg["status"] == "completed":
                return None if msg["result"] is None else json.loads(msg["result"])
            if msg["status"] == "failed":
                if msg["error_tag"] == "PayloadError":
                    errors = json.loads(msg["result"]) if msg["result"] else msg["error_message"]
                    raise PayloadError(f"update {name!r}", errors)
                raise UpdateFailed(run_id, name, msg["error_tag"], msg["error_message"])
            if ended:  # the message read after the run's end: still unanswered
                raise UpdateFailed(run_id, name, "RunEnded", f"the run ended ({ended}) before answering")
            run = await self.store.read(shared.get_run, run_id)
            if run["status"] in shared.TERMINAL:  # read the message once more: answered just before it ended?
                ended = str(run["status"])
                continue
            wait = delay if deadline is None else min(delay, deadline - loop.time())
            if wait <= 0:
                raise ResultTimeout(f"update {name!r} on run {run_id} was not answered within {timeout}s")
            await wait_event(event, wait)
            delay = min(delay * 2, self.poll_interval)

    def _sealed(self, row: Row) -> bool:
        """Whether the run's values are sealed: its workflow encrypts, or its payload came sealed."""
        if is_sealed(row["payload"]):
            return True
        try:
            return self.app.get(row["workflow"]).encrypt_steps
        except Exception:
            return False

    def _message_model(self, row: dict[str, Any], kind: str, name: str) -> type[BaseModel] | None:
        """The model a signal/update must match: declared on the workflow, or the one the body waits with."""
        try:
            defn = self.app.get(row["workflow"])
        except Exception:
            defn = None
        declared = {} if defn is None else defn.signals if kind == "signal" else defn.updates
        if name in declared:
            return declared[name]
        waiting = json.loads(row["waiting_for"]) if row["waiting_for"] else {}
        ref = (waiting.get("models") or {}).get(name)
        return import_model(ref) if ref else None

    # -- recovery verbs -----------------------------------------------------------------

    async def cancel(self, run_id: str, reason: str | None = None, *, compensate: bool = False) -> None:
        """Cancel a running or suspended run (its children follow their parent-close policy)."""
        now = self.clock.now()
        if compensate:  # its ctx.compensations() blocks undo what it did first (engine/cancelling.py)
            return await cancelling.request_cancel(self.core.runtime, run_id, reason, now)
        stopped = await self.store.write(runs.cancel_run, run_id, reason, now)
        self.stopped(stopped, "cancelled")

    async def suspend(self, run_id: str, reason: str | None = None) -> None:
        """Park a running run until ``resume``; its journal is kept."""
        now = self.clock.now()
        await self.store.write(runs.suspend_run, run_id, reason, now)
        self.stopped([run_id], "suspended")

    async def resume(self, run_id: str) -> None:
        """Continue a suspended run: completed steps replay, a failed step runs again."""
        await self._reopen(runs.resume_run, run_id)

    async def redrive(self, run_id: str) -> None:
        """Continue a failed run from its journal: completed steps replay, failed ones re-run."""
        await self._reopen(runs.redrive_run, run_id)

    async def resume_from_step(self, run_id: str, step: str) -> None:
        """Re-run a failed run from ``step`` (by name, or ``name#n``): earlier steps replay."""
        await self._reopen(runs.resume_from_step, run_id, step)

    async def discard(self, run_id: str) -> bool:
        """Acknowledge a failed run (it stays failed, but leaves the dead-letter view).

        Idempotent: ``True`` if this call discarded the run, ``False`` if it already was (nothing changes).
        """
        now = self.clock.now()
        return await self.store.write(runs.discard_run, run_id, now)

    async def retry(self, run_id: str, payload_override: Any = None) -> RunHandle:
        """A fresh run of a failed or cancelled run's workflow (same payload unless overridden)."""
        row = await self.store.read(shared.get_run, run_id)
        if row["status"] not in ("failed", "cancelled"):
            raise RunNotEligible("retry", run_id, row["status"], "only failed or cancelled runs can be retried")
        defn = self.app.get(row["workflow"])
        source = open_payload(self.keyring, row) if payload_override is None else payload_override
        now = self.clock.now()
        if defn.gate.item_model is None:  # through the gate, like any start: limits and windows count it
            source = validate_payload(defn.payload_model, source, what=f"retry of {defn.name!r} payload")
            handle = await admit(
                self.core.runtime,
                defn.name,
                source,
                at=None,
                wait=False,
                idempotency_key=None,
                flow_control=None,
                retry_of=run_id,
            )
            self.store.write_nowait(
                shared.add_event,
                run_id,
                "run-retried",
                now,
                {"new_run_id": handle.run_id, "ticket": handle.ticket, "status": handle.status},
            )
            return handle
        # a batch run is retried whole: its payload is the batch, not one item
        model = validate_payload(defn.payload_model, source, what=f"retry of {defn.name!r} payload")
        new_row = self.new_run_row(defn, model)
        new_row["retry_of"] = run_id
        new_row["source"] = f"retry:{run_id}"

        async def op(tx: Any) -> dict[str, Any]:
            created, _ = await runs.create_run(tx, new_row, now)
            await shared.add_event(tx, run_id, "run-retried", now, {"new_run_id": new_row["id"]})
            return created

        created = await self.store.write(op)
        self.wake(now)
        return RunHandle(
            workflow=defn.name, status="started", ticket=created["ticket"], run_id=created["id"], _client=self.core
        )

    async def _reopen(self, op: Callable[..., Awaitable[None]], *args: str) -> None:
        now = self.clock.now()
        await self.store.write(op, *args, now)
        self.wake(now)

    def stopped(self, run_ids: list[str], reason: str) -> None:
        """Runs ended from outside: stop any local execution and release result waiters."""
        self.core.runtime.stopped(run_ids, reason)

    # -- schedules (reads: inspect/schedules.py; verbs: engine/schedules.py) ----------------

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule, declared or stored (orphaned), with its next firing time."""
        return await self.inspector.schedules()

    async def schedule_firings(self, name: str, limit: int = 50) -> list[FiringInfo]:
        """The firing ledger of schedule ``name``: claimed, skipped (why), started, failed..., newest first."""
        return await self.inspector.schedule_firings(name, limit)

    async def pause_schedule(self, name: str, reason: str | None = None) -> None:
        """Stop ``name`` firing on every replica until ``unpause_schedule``."""
        await schedules.pause(self._schedules(), name, True, reason)

    async def unpause_schedule(self, name: str) -> None:
        """Let ``name`` fire again from its next slot (slots passed while paused are not caught up)."""
        await schedules.pause(self._schedules(), name, False)

    async def run_schedule(self, name: str) -> Fired:
        """Fire ``name`` now (a manual firing, recorded in its ledger)."""
        return await schedules.run_now(self._schedules(), name)

    async def backfill_schedule(
        self, name: str, start: datetime, end: datetime, *, commit: bool = False
    ) -> list[schedules.BackfillSlot]:
        """Fire ``name``'s slots between ``start`` and ``end`` not fired yet (a dry run unless ``commit``)."""
        return await schedules.backfill(self._schedules(), name, start, end, commit=commit)

    def _schedules(self) -> ScheduleRuntime:
        return ScheduleRuntime(self.core.runtime, self.schedule_owner)

    async def cancel_many(
        self, *, reason: str, limit: int, workflow: str | None = None, status: str | None = None, commit: bool = False
    ) -> BulkResult:
        """Cancel up to ``limit`` running/suspended runs (a dry run unless ``commit``)."""
        check_reason(reason, "on every cancelled run's run-cancelled event")
        eligible = ("running", "suspended")
        wanted = statuses(status, eligible, "cancel")
        return await bulk(
            self.store, "cancel", wanted, eligible, workflow, limit, commit, lambda run_id: self.cancel(run_id, reason)
        )

    async def replay_many(
        self, *, mode: str, limit: int, workflow: str | None = None, status: str | None = None, commit: bool = False
    ) -> BulkResult:
        """Redrive (failed) or retry (failed, cancelled) up to ``limit`` runs (a dry run unless ``commit``)."""
        if mode not in ("redrive", "retry"):
            raise InvalidArgument("mode is required: 'redrive' (failed runs) or 'retry' (failed or cancelled runs)")
        eligible = ("failed",) if mode == "redrive" else ("failed", "cancelled")
        wanted = statuses(status, eligible, mode)

        async def act(run_id: str) -> None:
            if mode == "redrive":
                await self.redrive(run_id)
            else:
                await self.retry(run_id)

        return await bulk(self.store, mode, wanted, eligible, workflow, limit, commit, act)
