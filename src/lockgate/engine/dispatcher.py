"""The dispatcher: claims runnable runs under a lease and executes them here.

It claims runs whose wake time has come and that no live lease holds, up to ``max_concurrent_runs``,
renews the leases of the runs it executes, and sleeps until the next wake time, a local wake-up, or
the poll interval. It is the ``Local`` side its ``Core`` calls: a start made here wakes it, and a
blocking start (``run()``, ``start(wait=True)``) claims its run in the transaction that creates it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import os
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from ..clock import stop_tasks, to_datetime
from ..definitions import WorkflowDef, retry_hint
from ..durations import format_seconds
from ..errors import StoreCorrupt, StoreError, WorkflowCrashLooped
from ..gate.admission import admit
from ..gate.drainer import Drainer
from ..gate.handoff import Early, HandOff, Passed, hand_off_for
from ..gate.pipeline import Decision
from ..gate.runtime import Runtime, WorkerRuntime
from ..handles import RunHandle
from ..ids import short_id
from ..observer import Observer, RunOutcome
from ..recording import REPLAY_SHAPE_LIMIT
from ..routing import Selection, claim_filter, offers_for, taken
from ..store import journal as store_journal
from ..store import runs, shared, workers
from ..store.base import LISTENING, Row
from . import flow_waiters
from .claim_order import ClaimOrder
from .core import Core, WorkflowRef
from .durable import Running
from .early import UNDONE, EarlyClaims, claim_starting
from .executor import Execution
from .identity import ScopeResolver
from .lease_watch import LAPSING, LeaseWatch
from .leases import Outages, Wakeup, backoff, hand_back, overdue, release_dead_local_workers, report_released
from .publish_claims import PublishClaims
from .shutdown import Drained, Shutdown, drain

__all__ = ["Dispatcher", "Shutdown"]

log = logging.getLogger("lockgate.engine")
runs_log = logging.getLogger("lockgate.runs")  # one line as a run starts and as it ends here (lockgate serve)


class Dispatcher(PublishClaims):
    """Claims and executes runs for one worker process over ``core`` (which it serves); the runs a publish
    made here wakes are claimed in its transaction (``publish_claims.py``)."""

    @property
    def runtime(self) -> Runtime:
        """The seam the gate decides with (``Host``: a gated child is offered through it)."""
        return self.core.runtime

    def __init__(
        self,
        core: Core,
        *,
        max_concurrent_runs: int,
        lease: float,
        inline_sleep: float,
        max_reclaims: int,
        worker_id: str,
        host: str,
        resolve_scopes: ScopeResolver | None = None,
        replay_shape_limit: int = REPLAY_SHAPE_LIMIT,
        step_threads: int | None = None,
        selection: Selection | None = None,
    ) -> None:
        self.core = core
        self.selection = selection or Selection()  # what this process takes (routing.py)
        # plain ``def`` steps: as many threads as runs by default, so no run's step waits for a thread
        self.step_threads = step_threads or max_concurrent_runs
        self.step_pool: Executor = ThreadPoolExecutor(self.step_threads, thread_name_prefix="lockgate-step")
        self.resolve_scopes = resolve_scopes  # asked on every execution attempt (engine/identity.py)
        self.app = core.app
        self.store = core.store
        self.clock = core.clock
        self.keyring = core.keyring
        self.public_url = core.public_url  # where callback tokens' URLs point (engine/callbacks.py)
        self.max_concurrent_runs = max_concurrent_runs
        self.lease = lease
        self.inline_sleep = inline_sleep
        self.input_limit = core.input_limit
        self.stream_hub = core.streams
        self.replay_shape_limit = replay_shape_limit  # the tripwire is off for longer journals
        self.max_reclaims = max_reclaims
        self.worker_id = worker_id
        self.host = host
        self.executions: dict[str, Execution] = {}
        self.draining = False  # shutting down: running step attempts may finish, no new one begins
        self.broken = asyncio.Event()  # set when the store is found corrupt: retrying cannot help
        self.inflight: set[str] = set()
        self.epochs: dict[str, int] = {}  # the runs executed here and the epoch each was claimed at
        self.early = EarlyClaims(self._launch_claimed, self._stop_early)  # executed as their claims' COMMIT went out
        self._suspects: dict[str, int] = {}  # rows naming this worker it did not hold at the last heartbeat
        self.watch = LeaseWatch(self.clock, lease, lambda: self.executions)  # stops what it cannot renew in time
        self._background: set[asyncio.Future[Any]] = set()
        self._wake = Wakeup()
        # which workers claim first on another process's wake-up; one that cannot claim passes it on
        self.claim_order = ClaimOrder(worker_id, self.store, self._wake.set, lambda: self._claims() > 0)
        self._tasks: list[asyncio.Task[Any]] = []
        self._running = False
        self._outages = Outages()
        self._handbacks: set[asyncio.Task[None]] = set()
        self._workflows: frozenset[str] = frozenset()  # the workflows this process takes (routing.taken)
        self._claim_keys = self._claim_patches = "[]"  # routing.claim_filter: what its claims ask for
        self._full = False  # the dispatcher waits for a run to end before it can claim
        self._pressing: frozenset[str] = frozenset()  # the last claim filled every place: whose keys (``pressing``)
        self._give_way = flow_waiters.RoomMaker(self.store, worker_id, core.poll_interval)
        self._reserved = 0  # slots held for runs blocking starts claim as they create them
        core.serve(self)
        self.worker = WorkerRuntime(
            runtime=core.runtime,
            worker_id=worker_id,
            lease=lease,
            running=self.is_running,
            store_failed=self.store_failed,
            store_recovered=self.store_recovered,
        )
        self.drainer = Drainer(self.worker)

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Register this worker and start the dispatcher, the lease renewal and the drainer (core open)."""
        defs = self.app.definitions()
        names = taken(defs, self.app.queues, self.selection)  # an unknown name is an error here, at boot
        offers = offers_for(defs, names)
        self._claim_keys, self._claim_patches = claim_filter(offers)
        offered = json.dumps({wf: o.to_dict() for wf, o in offers.items()})
        labels = json.dumps(dict(self.selection.labels))
        now = self.clock.now()
        me, offset, pid = self.worker_id, self.core.clock_watch.offset, os.getpid()
        register = workers.register_with_lease
        await self.store.write(register, me, self.host, pid, now, self.lease, offset, labels, offered)
        if self.store.cross_process_wakeups:
            self.store.add_listener(self._on_wakeup)
            self.store.executing_nothing(not self.inflight)  # the store may look for others' starts more often
            await self.claim_order.refresh(now)
        await release_dead_local_workers(self.store, self.clock, self.host, self.worker_id)
        self._running = True
        self._workflows = frozenset(names)
        self._tasks = [
            asyncio.create_task(self._dispatch(), name="lockgate-dispatcher"),
            asyncio.create_task(self._renew(), name="lockgate-leases"),
            asyncio.create_task(self.watch.loop(), name="lockgate-lease-watch"),
            asyncio.create_task(self.drainer.loop(), name="lockgate-drainer"),
        ]

    def adopt(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Loops started beside the dispatcher's own (the sweeps): ``close`` stops them with its own."""
        self._tasks += tasks

    async def close(self, grace: float = 0.0) -> Shutdown:
        """Stop the loops and the executions here; the runs are released for others to take.

        With ``grace``, first stop claiming and let the step attempts running here finish (up to
        ``grace`` seconds, leases renewed meanwhile) so that their results are journaled, not lost.
        """
        drained = await self._drain(grace) if grace > 0 and self._running else Drained(0, 0)
        self._running = False
        await stop_tasks(self._tasks)
        self._tasks = []
        for handback in list(self._handbacks):  # stop_worker below releases those runs anyway
            handback.cancel()
        executions = list(self.executions.values())
        for execution in executions:
            execution.stop("shutdown")
        for execution in executions:
            if execution.task is not None:
                with contextlib.suppress(BaseException):
                    await execution.task
        if self.core.is_open:
            now = self.clock.now()
            with contextlib.suppress(Exception):
                await self.store.write(workers.stop_worker, self.worker_id, now)
        self.step_pool.shutdown(wait=False, cancel_futures=True)  # a step still in a thread is not waited for
        return Shutdown(finished=drained.finished, released=len(executions) + drained.ended, ended=drained.ended)

    async def _drain(self, grace: float) -> Drained:
        """Stop claiming; wait for the step attempts running here (``grace``, then see shutdown.py)."""
        self.draining = True  # an execution begins no new step attempt now (engine/executor.py)
        stopping = [t for t in self._tasks if t.get_name() not in ("lockgate-leases", "lockgate-lease-watch")]
        await stop_tasks(stopping)
        self._tasks = [t for t in self._tasks if t not in stopping]
        return await drain(lambda: list(self.executions.values()), grace)  # the leases are renewed meanwhile

    def is_running(self) -> bool:
        """Whether the loops should keep going (false once ``close`` began)."""
        return self._running

    # -- wake-ups -----------------------------------------------------------------------

    def wake(self, at: float | None = None) -> None:
        """``wake(at)``: a run is runnable from ``at``; ``wake()``: anything may have changed (the gate too)."""
        claim = _CLAIM_AT_START.get()
        if at is not None and claim is not None and claim.run_id is not None:
            return  # the new run is this blocking start's own: it is launched here, not dispatched
        if at is None:
            self._wake.set()
            self.drainer.wake()
        elif at <= self.clock.now() + self.core.poll_interval:
            self._wake.set()  # a start, a park, a signal: the dispatcher's business, not the drainer's

    def _on_wakeup(self, channel: str, payload: str) -> None:
        """A wake-up the database raised for another process's write (see migrations 0003 and 0024)."""
        if channel == "runs":  # a run became claimable, or a timer was set: re-read when the next one is due
            self.claim_order.woken(payload)  # at once if among the first two, else a little later (claim_order.py)
            self.core.admissions.poke()  # it may be a parked start another process admitted
        elif channel in ("workers", LISTENING):  # one started or stopped: who claims first changes
            self.claim_order.changed(self.clock.now())
        elif channel == "gate" and self.drainer.holds_lease:
            self.drainer.wake()  # only the replica holding the drain lease drains; the others would only poll it
        elif channel == "events":
            self.core.published()  # another process published: the event sweeps here fan it out now

    def after_finish(self, run_id: str, stopped: list[str], ended: Row | None = None, *, settled: bool = False) -> None:
        """``settled``: the run's slot passed on in its end's transaction, and nothing is left to drain for it."""
        self.core.notify_finished(run_id, ended)
        self.stopped(stopped, "parent closed")
        execution = self.executions.get(run_id)
        row = None if execution is None else execution.row
        if row is None or row["parent_id"] is not None:
            self._wake.set()  # the parent may be runnable now
        if row is None or stopped or (not settled and any(row.get(k) for k in _GATE_HOLDS)):
            self.drainer.wake()  # a slot or a singleton key may have freed, a failure report may be parked

    async def hand_off(self, defn: WorkflowDef, row: Row, status: str) -> HandOff | None:
        """Where the slot of the run ``row`` goes as it ends with ``status``, when that is decided as it ends
        (``gate/handoff.py``); ``None``: the run ends the usual way and the drainer admits who is next."""
        if defn.gate.concurrency is None or not self._running:
            return None
        now = self.clock.now()
        target = hand_off_for(defn, row, status, await self.core.pauses.snapshot(), now)
        if target is None:
            return None
        scope, key, limit = target
        others = [e.row for rid, e in self.executions.items() if rid != row["id"]]
        held = sum(1 for o in others if o.get("slot_scope") == scope and (o.get("slot_key") or "") == key)
        room = 0 if self.draining else self._room() + 1  # the ending run's place is free again once it ends
        template = self.new_run_row(defn, "{}")
        spread = self.store.cross_process_wakeups
        early = Early(self.early.launch, self.early.undo) if room else None
        return HandOff(scope, key, limit, defn.gate, template, self.worker_id, self.lease, held, room, spread, early)

    def passed(self, passed: Passed) -> None:
        """A run's end passed its slot on: execute the run claimed for this worker; wake others for the rest."""
        if passed.claimed is not None:
            self.early.claimed(passed.claimed, self._launch_claimed)
        if passed.unclaimed:
            self._wake.set()  # this dispatcher (or another) claims them
        if passed.claimed is not None or passed.unclaimed:
            self.core.admissions.poke()

    def after_decision(self, defn: WorkflowDef, decision: Decision) -> None:
        """React to a gate decision as a client does; a parked start due soon wakes the drainer too."""
        self.core.after_decision(defn, decision)
        if decision.status == "queued" and (
            decision.due_at is None or decision.due_at <= self.clock.now() + self.core.poll_interval
        ):
            self.drainer.wake()

    # -- blocking starts ------------------------------------------------------------------

    async def admit_blocking(
        self,
        workflow: WorkflowRef,
        payload: Any,
        *,
        at: datetime | None,
        idempotency_key: str | None,
        flow_control: Any,
    ) -> RunHandle:
        """A blocking start (``run()``, ``start(wait=True)``) is executed here, claimed as it is created.

        Its caller waits in this process anyway; claiming the run in the transaction that
        creates it saves a commit and a dispatcher round trip. Without room, or if the gate
        does not start a run, it goes the usual way.
        """
        options = {"at": at, "wait": True, "idempotency_key": idempotency_key, "flow_control": flow_control}
        go = functools.partial(admit, self.core.runtime, workflow, payload, **options)
        if not self._running:
            return await go()
        claim = _ClaimAtStart()
        try:
            token = _CLAIM_AT_START.set(claim)
            try:
                handle = await go()
            finally:
                _CLAIM_AT_START.reset(token)
            if claim.run_id is not None and handle.status == "started" and handle.run_id == claim.run_id:
                row = claim.row or await self.store.read(runs.find_run, claim.run_id)
                if row is not None and row["owner"] == self.worker_id and row["status"] == "running":
                    if row["id"] not in self.inflight:
                        self.launch(row)
            return handle
        finally:
            if claim.run_id is not None:  # launched (now in flight) or not created: the slot is free again
                self._reserved -= 1

    def published(self) -> None:
        """A body here published a domain event: the event sweeps of this process tick at once, and the
        dispatcher claims the runs waiting for it that it woke (a publish through ``Client`` hands them over)."""
        self._wake.set()
        self.core.published()

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
        """The core's row; a blocking start's own run is claimed by this worker as it is inserted."""
        row = self.core.new_run_row(
            defn, payload, run_id=run_id, identity=identity, idempotency_key=idempotency_key, ticket=ticket
        )
        claim = _CLAIM_AT_START.get()
        mine = defn.name in self._workflows  # a workflow this process does not take waits for one that does
        if claim is not None and claim.run_id is None and self._running and self._room() > 0 and mine:
            now = self.clock.now()  # the columns a claim sets (claim_runs), on the new row
            row.update(owner=self.worker_id, epoch=1, entries=1, entered_at=now, lease_until=now + self.lease)
            claim.run_id = row["id"]
            self._reserved += 1
        return row

    @property
    def observer(self) -> Observer | None:
        """The core's observer (metrics, traces), if any."""
        return self.core.observer

    def created_here(self, created: Row, now: float) -> None:
        """A start made here created ``created``: a blocking start executes it from the row inserted."""
        if self.core.observer is not None:
            self.core.observer.run_started(created["workflow"])
        claim = _CLAIM_AT_START.get()
        if claim is not None and claim.run_id == created["id"]:  # executed from the row inserted, not read back
            claim.row = {**created, "reclaim_count": 0, "updated_at": now, "progress_at": now}

    def _room(self) -> int:
        return self.max_concurrent_runs - len(self.inflight) - self._reserved

    def _claims(self) -> int:  # how many runs the dispatcher would claim now
        return self._room() if self._running and not self.draining else 0

    def room_to_wait(self, deep: int, key: str) -> bool:
        """Whether a refused step waits in place further back in its key's line than its parallelism (``deep``:
        how many do here now; ``flow_waiters.room_to_wait``). A run due later takes a waiter's place (``RoomMaker``)."""
        return self._running and not self.draining and flow_waiters.room_to_wait(
            self._pressing, key, deep, self.max_concurrent_runs
        )

    def finishes_here(self, row: Row) -> bool:
        """A run this engine holds, or will claim when it is due, ends here: waiters are woken, not polling.

        Only a run another process holds is polled with a short back-off; the rest are read
        again every ``poll_interval`` in case another process takes them after all.
        """
        owner = row["owner"]
        return self._running and (owner == self.worker_id or (owner is None and row["workflow"] in self._workflows))

    def running_here(self, run_id: str) -> bool:
        """Whether this process executes ``run_id`` now (its end then wakes the waiters)."""
        return run_id in self.inflight

    def stopped(self, run_ids: list[str], reason: str) -> None:
        """Runs ended from outside: stop their executions here and release their result waiters."""
        for rid in run_ids:
            execution = self.executions.get(rid)
            if execution is not None:
                execution.stop(reason)
            self.core.notify_finished(rid)

    def message_settled(self, message_id: str) -> None:
        self.core.message_settled(message_id)

    def on_step_error(self, execution: Running, step_key: str, error: BaseException) -> None:
        """A step error that carries ``retry_after`` pauses the run's flow-control keys until then."""
        hint = retry_hint(error)
        if hint is None or hint <= 0:
            return
        row = execution.row
        scope = row.get("slot_scope") or ""
        pool = scope.removeprefix("pool:") if scope.startswith("pool:") else None
        keys = [k for k in (row.get("slot_key"), pool) if k]
        if not keys:
            return
        stamp = to_datetime(self.clock.now() + hint)  # to the microsecond, as ``pause_key`` takes it
        until = None if stamp is None else stamp.timestamp()
        for key in keys:
            task = asyncio.ensure_future(self.core.pauses.pause(f"key:{key}", f"retry-after from {step_key}", until))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    # -- dispatching ----------------------------------------------------------------------

    async def _dispatch(self) -> None:
        keys, patches = self._claim_keys, self._claim_patches
        failures = 0
        while self._running:
            self._wake.clear()
            try:
                delay = self.core.poll_interval  # full, or nothing due is ours: wait for a wake-up, never spin
                free = self._room()
                self._full = free <= 0
                if free <= 0:
                    await self._give_way.look(self.clock.now())  # steps waiting in place give way to due runs
                if free > 0:
                    # Claim at once: an empty claim costs what the read that would precede it costs.
                    now = self.clock.now()
                    claim = (self.app, self.keyring, self.worker_id, now, now + self.lease, free, keys, patches)
                    claimed, due = await self.store.write(claim_starting, self.early, *claim)  # and event waiters
                    for row, journal in claimed:  # each unless it began as the claim went out
                        self.early.claimed(row, functools.partial(self.launch, journal=journal))
                    self._pressing = flow_waiters.pressing(claimed, free, self.app)
                    if len(claimed) == free:
                        continue  # there may be more; the next turn waits for a free slot
                    if due is not None and due > now:
                        delay = min(self.core.poll_interval, max(0.0, due - self.clock.now()))
                if delay > 0:
                    await self._wake.wait(delay)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                self.store_failed("dispatcher", exc)
                await asyncio.sleep(backoff(failures, self.core.poll_interval))
            else:
                failures = 0
                self.store_recovered()

    def launch(self, row: Row, journal: list[Row] | None = None) -> asyncio.Task[None] | None:
        """Execute the claimed run ``row`` in a task of its own (unless it executes here under that very hold)."""
        if self.epochs.get(row["id"]) == int(row["epoch"]):  # a claim a failover lost, made again: it goes on
            self.watch.held(row["id"], row["lease_until"])
            return None
        if not self.inflight:
            self.store.executing_nothing(False)
        self.inflight.add(row["id"])
        self.epochs[row["id"]] = int(row["epoch"])
        self.watch.held(row["id"], row["lease_until"])
        execution_task = asyncio.create_task(self._execute(row, journal), name=f"lockgate-run-{row['id']}")
        execution_task.add_done_callback(self._slot_freed)
        return execution_task

    def _launch_claimed(self, row: Row) -> asyncio.Task[None] | None:
        """Execute a run claimed for this worker as another ended, unless it is stopping (that releases it)."""
        return self.launch(row) if self._running and not self.draining else None

    def _stop_early(self, run_id: str, task: asyncio.Task[None] | None) -> None:
        if (execution := self.executions.get(run_id)) is not None:
            execution.stop(UNDONE)
        elif task is not None:
            task.cancel()

    def _slot_freed(self, _task: asyncio.Task[None]) -> None:
        if self._full:  # the dispatcher waits for room: it may claim again
            self._full = False
            self._wake.set()

    async def _execute(self, row: Row, journal: list[Row] | None) -> None:
        run_id = row["id"]
        try:
            defn = self.app.get(row["workflow"])
            fence = shared.Fence(run_id, row["owner"], int(row["epoch"]))
            if int(row["reclaim_count"]) >= self.max_reclaims:
                await self._crash_looped(row, fence)
                return
            if not defn.accepts_version(row["version"]):  # claims ask for the versions this code runs: a guard
                seen = (run_id, row["version"], defn.version)
                log.warning("run %s: version %r is not this code's (%r): handed back", *seen)
                await self.store.write(runs.release_run, fence, self.clock.now() + self.lease)
                return
            # Only the run's own held entries write its journal: on its first entry there is none to read.
            if journal is None:
                journal = [] if int(row["entries"]) <= 1 else await self.store.read(store_journal.load_journal, run_id)
            execution = Execution(self, defn, row, journal)
            self.executions[run_id] = execution
            if int(row["entries"]) <= 1:
                runs_log.info("%s %s started", row["workflow"], short_id(run_id))
            observer = self.core.observer
            if observer is None:
                await execution.run()
            else:
                await self._observed(observer, execution)
            if execution.outcome not in ("parked", "stopped") and runs_log.isEnabledFor(logging.INFO):
                took = max(0.0, self.clock.now() - float(row.get("created_at") or self.clock.now()))
                ended = (row["workflow"], short_id(run_id), execution.outcome, format_seconds(round(took, 3)))
                runs_log.info("%s %s %s in %s", *ended)
            reason = execution.stop_reason
            if reason == "lease lost" or (reason == LAPSING and execution.outcome == "stopped"):  # else it ended
                lost = _LAPSING if reason == LAPSING else _LOST
                log.warning("run %s: %s; this execution stopped, its late writes refused", run_id, lost)
        except shared.Fenced:
            log.warning("run %s: %s; its late write was refused", run_id, _LOST)
        except asyncio.CancelledError:
            raise
        except StoreError as exc:
            # The store went away under the run (or refused a write): the run did not fail. Hand it
            # back once the store answers; any worker then re-enters it from its journal.
            self.store_failed(f"run {run_id}", exc)
            self._hand_back(shared.Fence(run_id, row["owner"], int(row["epoch"])))
        except Exception:
            log.exception("run %s: executor failed; the run will be retried after its lease", run_id)
            held = shared.Fence(run_id, row["owner"], int(row["epoch"]))
            with contextlib.suppress(Exception, shared.Fenced):  # else the lease renewal keeps it here forever
                await self.store.write(runs.release_run, held, self.clock.now() + self.lease)
        finally:
            self.executions.pop(run_id, None)
            self.inflight.discard(run_id)
            if not self.inflight:
                self.store.executing_nothing(True)
            if self.epochs.get(run_id) == int(row["epoch"]):
                del self.epochs[run_id]
                self.watch.forget(run_id)

    async def _observed(self, observer: Observer, execution: Execution) -> None:
        """``execution.run()`` reported: its attempt (a span around the body), a takeover, the run's end."""
        row = execution.row
        if int(row["reclaim_count"]) > 0:
            observer.lease_takeover(row["workflow"])
        outcome = RunOutcome()
        with observer.run_attempt(row, outcome):
            try:
                await execution.run()
            finally:
                outcome.value = execution.outcome
        if outcome.value in ("succeeded", "failed", "suspended"):
            observer.run_ended(row["workflow"], outcome.value)

    async def _crash_looped(self, row: Row, fence: shared.Fence) -> None:
        now = self.clock.now()
        message = (
            f"the body was entered {row['reclaim_count']} time(s) in a row without finishing "
            f"(max_reclaims={self.max_reclaims})"
        )

        async def op(tx: Any) -> None:
            await store_journal.touch(tx, fence, now)
            await shared.add_event(tx, row["id"], "run-crashlooped", now, {"reclaims": row["reclaim_count"]})
            await runs.suspend_run(
                tx, row["id"], "crash loop", now, error_tag=WorkflowCrashLooped.__name__, error_message=message
            )

        await self.store.write(op)
        self.core.notify_finished(row["id"])

    # -- leases ---------------------------------------------------------------------------

    async def _renew(self) -> None:
        """The heartbeat: read the database's clock, renew the runs executed here (by id and epoch),
        release the rows naming this worker that it does not execute (``workers.renew_leases``)."""
        interval = self.lease / 3
        while self._running:
            await asyncio.sleep(interval)
            try:  # unanswered at half the lease (its last renewal ended a third of it ago): said now
                with overdue(self.lease / 2, "lease renewal", self.store_failed):
                    offset = await self.core.clock_watch.read()
                    now = self.clock.now()
                    mine, until, before = dict(self.epochs), now + self.lease, now - interval
                    suspects, renew = self._suspects, workers.renew_leases
                    done = await self.store.write(renew, self.worker_id, now, until, mine, suspects, before, offset)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.store_failed("lease renewal", exc)
                continue
            self.store_recovered()
            self._suspects = done.suspects
            await self.claim_order.refresh(now)
            for rid in done.held:
                self.watch.held(rid, until)
            for rid, execution in list(self.executions.items()):  # one launched since ``mine`` was not asked about
                if mine.get(rid) == execution.fence.epoch != done.held.get(rid):
                    execution.stop("lease lost")  # logged when the execution ends
            if done.released:
                report_released(done.released)
                self._wake.set()  # this worker may resume them too

    def _hand_back(self, fence: shared.Fence) -> None:
        """Release a run whose execution broke on the store, retrying until the store answers."""
        release = hand_back(self.store, self.clock, fence, self, self.core.poll_interval, self._wake.set)
        task = asyncio.create_task(release, name=f"lockgate-handback-{fence.run_id}")
        self._handbacks.add(task)
        task.add_done_callback(self._handbacks.discard)

    # -- outages --------------------------------------------------------------------------

    def store_failed(self, where: str, exc: BaseException) -> None:
        """A loop's store call failed: an outage is logged once, when it begins; anything else each time.

        The engine's loops (dispatcher, lease renewal, sweeps, hand-backs) report here, and
        ``store_recovered`` after their next success, so an outage reads as two log lines. A
        corrupt store is no outage: ``broken`` is set (``lockgate serve`` then stops with exit 1).
        """
        if isinstance(exc, StoreCorrupt):
            if not self.broken.is_set():
                log.error("%s failed: %s", where, exc)
                self.broken.set()
            return
        self._outages.failed(where, exc)

    def store_recovered(self) -> None:
        """A loop's store call succeeded: if an outage was logged, log its end."""
        self._outages.recovered()

    @property
    def claiming(self) -> bool:
        """Whether a claimed run has not reached its body yet."""
        return len(self.inflight) != len(self.executions)


_LOST = "lease lost (another worker took the run over, or it was ended elsewhere)"
_LAPSING = "lease lost (not renewed in time: the store did not answer; another worker may take the run over)"


class _ClaimAtStart:
    """The run a blocking start claims as it creates it (set by ``new_run_row``)."""

    __slots__ = ("row", "run_id")

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.row: Row | None = None  # the run's row as created, when the start knows it (a bare start)


_CLAIM_AT_START: contextvars.ContextVar[_ClaimAtStart | None] = contextvars.ContextVar(
    "lockgate_claim_at_start", default=None
)


# Run columns naming something the gate holds for the run until it ends (a finish wakes the drainer).
_GATE_HOLDS = ("slot_scope", "singleton_key", "on_failure")
