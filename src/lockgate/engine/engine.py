"""``Engine``: a ``Client`` that also executes runs and runs the sweeps.

The dispatcher claims runnable runs (their wake time has come and no live lease holds
them) up to ``max_concurrent_runs``, renews the leases of the runs it executes, and
sleeps until the next wake time, a local wake-up, or the poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import socket
import time
from typing import Any

from ..app import App
from ..clock import Clock, to_datetime
from ..definitions import WorkflowDef, retry_hint
from ..durations import Duration, to_seconds
from ..errors import StoreError, WorkflowCrashLooped, WorkflowVersionIncompatible
from ..gate.drainer import Drainer
from ..gate.handoff import HandOff, Passed, hand_off_for
from ..gate.pipeline import Decision
from ..handles import RunHandle
from ..ids import new_id
from ..store import Store, runs, shared, workers
from ..store import journal as store_journal
from ..store.base import Row
from .client import DEFAULT_STORE, Client, WorkflowRef
from .executor import Execution

__all__ = ["Engine"]

log = logging.getLogger("lockgate.engine")

MIN_RETENTION = 60.0
"""Seconds: a shorter retention would delete runs before their callers have read their results."""


class Engine(Client):
    """Runs workflows from ``store``: ``async with Engine(app) as engine: ...``.

    ``lease`` bounds how long a run held by a dead process waits before another takes
    it; ``inline_sleep`` is the longest timer a body waits for in place instead of
    parking; ``stall_after`` is the staleness threshold (per workflow: ``stall_after=``).
    ``retention``: runs that ended longer ago are deleted with their records, and so are
    ledger rows that old (``flow()``'s counts stay); ``None`` keeps everything.
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
        max_reclaims: int = 3,
        recording: str = "full",
        clock: Clock | None = None,
        worker_id: str | None = None,
    ) -> None:
        super().__init__(
            app, store, clock=clock, poll_interval=to_seconds(poll_interval, what="poll_interval"), recording=recording
        )
        if max_concurrent_runs < 1:
            raise ValueError("max_concurrent_runs must be >= 1")
        if max_reclaims < 1:
            raise ValueError("max_reclaims must be >= 1")
        self.max_concurrent_runs = max_concurrent_runs
        self.lease = to_seconds(lease, what="lease")
        if self.lease < 0.5:
            raise ValueError("lease must be at least 500ms")
        self.inline_sleep = to_seconds(inline_sleep, what="inline_sleep")
        self.stall_after = to_seconds(stall_after, what="stall_after")
        self.retention = None if retention is None else to_seconds(retention, what="retention")
        if self.retention is not None and self.retention < MIN_RETENTION:
            raise ValueError(f"retention must be at least 1m (or None to keep everything), got {retention!r}")
        self.max_reclaims = max_reclaims
        self.worker_id = worker_id or new_id("wkr")
        self.host = socket.gethostname()
        self._executions: dict[str, Execution] = {}
        self._inflight: set[str] = set()
        self._background: set[asyncio.Future[Any]] = set()
        self._wake = _Wakeup()
        self._tasks: list[asyncio.Task[Any]] = []
        self._running = False
        self._outage_since: float | None = None  # monotonic time the store was first found unreachable
        self._handbacks: set[asyncio.Task[None]] = set()
        self._workflows: frozenset[str] = frozenset()
        self._full = False  # the dispatcher waits for a run to end before it can claim
        self._reserved = 0  # slots held for runs blocking starts claim as they create them
        self.drainer = Drainer(self)

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        await super().open()
        now = self.clock.now()
        await self.store.write(workers.register_with_lease, self.worker_id, self.host, os.getpid(), now, self.lease)
        if self.store.cross_process_wakeups:
            self.store.add_listener(self._on_wakeup)
        await self._release_dead_local_workers()
        self._running = True
        self._workflows = frozenset(self.app.definitions())
        from ..sweeps import start_sweeps

        self._tasks = [
            asyncio.create_task(self._dispatch(), name="lockgate-dispatcher"),
            asyncio.create_task(self._renew(), name="lockgate-leases"),
            asyncio.create_task(self.drainer.loop(), name="lockgate-drainer"),
            *start_sweeps(self),
        ]

    async def close(self) -> None:
        self._running = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks = []
        for handback in list(self._handbacks):  # stop_worker below releases those runs anyway
            handback.cancel()
        executions = list(self._executions.values())
        for execution in executions:
            execution.stop("shutdown")
        for execution in executions:
            if execution.task is not None:
                with contextlib.suppress(BaseException):
                    await execution.task
        if self._open:
            now = self.clock.now()
            with contextlib.suppress(Exception):
                await self.store.write(workers.stop_worker, self.worker_id, now)
        await super().close()

    async def _release_dead_local_workers(self) -> None:
        """Runs held by a process on this host that no longer exists are released at once."""
        rows = await self.store.read(workers.live_workers_on_host, self.host, self.worker_id)
        now = self.clock.now()
        for row in rows:
            if _pid_alive(int(row["pid"])):
                continue
            released = await self.store.write(workers.stop_worker, row["id"], now, clean=False)
            if released:
                log.warning("worker %s (pid %s) is gone; released %d run(s)", row["id"], row["pid"], len(released))

    # -- wake-ups -----------------------------------------------------------------------

    def wake(self, at: float | None = None) -> None:
        """``wake(at)``: a run is runnable from ``at``; ``wake()``: anything may have changed (the gate too)."""
        claim = _CLAIM_AT_START.get()
        if at is not None and claim is not None and claim.run_id is not None:
            return  # the new run is this blocking start's own: it is launched here, not dispatched
        if at is None:
            self._wake.set()
            self.drainer.wake()
        elif at <= self.clock.now() + self.poll_interval:
            self._wake.set()  # a start, a park, a signal: the dispatcher's business, not the drainer's

    def _on_wakeup(self, channel: str, payload: str) -> None:
        """A wake-up the database raised for another process's write (see migration 0003)."""
        if channel == "runs":  # a run became claimable, or a timer was set: re-read when the next one is due
            self._wake.set()
            self._admissions.poke()  # it may be a parked start another process admitted
        elif channel == "gate" and self.drainer._lease_until > self.clock.now():
            self.drainer.wake()  # only the replica holding the drain lease drains; the others would only poll it

    def after_finish(self, run_id: str, stopped: list[str], ended: Row | None = None, *, settled: bool = False) -> None:
        """``settled``: the run's slot passed on in its end's transaction, and nothing is left to drain for it."""
        self.notify_finished(run_id, ended)
        self.stopped(stopped, "parent closed")
        execution = self._executions.get(run_id)
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
        target = hand_off_for(defn, row, status, await self.pause_snapshot(), now)
        if target is None:
            return None
        scope, key, limit = target
        held = sum(  # what decides whether this worker claims the next run (``HandOff.held``)
            1
            for rid, other in self._executions.items()
            if rid != row["id"] and other.row.get("slot_scope") == scope and (other.row.get("slot_key") or "") == key
        )
        template = self.new_run_row(defn, "{}")
        return HandOff(scope, key, limit, defn.gate, template, self.worker_id, self.lease, held)

    def passed(self, passed: Passed) -> None:
        """A run's end passed its slot on: execute the run claimed for this worker; wake others for the rest."""
        if passed.claimed is not None and self._running:  # else closing: stopping the worker releases it
            self._launch(passed.claimed)
        if passed.unclaimed:
            self._wake.set()  # this dispatcher (or another) claims them
        if passed.claimed is not None or passed.unclaimed:
            self._admissions.poke()

    def after_decision(self, defn: WorkflowDef, decision: Decision) -> None:
        super().after_decision(defn, decision)
        if decision.status == "queued" and (
            decision.due_at is None or decision.due_at <= self.clock.now() + self.poll_interval
        ):
            self.drainer.wake()

    # -- blocking starts ------------------------------------------------------------------

    async def _admit(
        self,
        workflow: WorkflowRef,
        payload: Any,
        *,
        at: Any,
        wait: bool,
        idempotency_key: str | None,
        flow_control: Any,
    ) -> RunHandle:
        """A blocking start (``run()``, ``start(wait=True)``) is executed here, claimed as it is created.

        Its caller waits in this process anyway; claiming the run in the transaction that
        creates it saves a commit and a dispatcher round trip. Without room, or if the gate
        does not start a run, it goes the usual way.
        """
        if not wait or not self._running:
            return await super()._admit(
                workflow, payload, at=at, wait=wait, idempotency_key=idempotency_key, flow_control=flow_control
            )
        claim = _ClaimAtStart()
        try:
            token = _CLAIM_AT_START.set(claim)
            try:
                handle = await super()._admit(
                    workflow, payload, at=at, wait=wait, idempotency_key=idempotency_key, flow_control=flow_control
                )
            finally:
                _CLAIM_AT_START.reset(token)
            if claim.run_id is not None and handle.status == "started" and handle.run_id == claim.run_id:
                row = claim.row or await self.store.read(runs.find_run, claim.run_id)
                if row is not None and row["owner"] == self.worker_id and row["status"] == "running":
                    if row["id"] not in self._inflight:
                        self._launch(row)
            return handle
        finally:
            if claim.run_id is not None:  # launched (now in flight) or not created: the slot is free again
                self._reserved -= 1

    def new_run_row(self, defn: WorkflowDef, payload: Any, **kwargs: Any) -> dict[str, Any]:
        row = super().new_run_row(defn, payload, **kwargs)
        claim = _CLAIM_AT_START.get()
        if claim is not None and claim.run_id is None and self._running and self._room() > 0:
            now = self.clock.now()  # the columns a claim sets (claim_runs), on the new row
            row.update(owner=self.worker_id, epoch=1, entries=1, entered_at=now, lease_until=now + self.lease)
            claim.run_id = row["id"]
            self._reserved += 1
        return row

    def created_here(self, created: Row, now: float) -> None:
        claim = _CLAIM_AT_START.get()
        if claim is not None and claim.run_id == created["id"]:  # executed from the row inserted, not read back
            claim.row = {**created, "reclaim_count": 0, "updated_at": now, "progress_at": now}

    def _room(self) -> int:
        return self.max_concurrent_runs - len(self._inflight) - self._reserved

    def _finishes_here(self, row: Row) -> bool:
        """A run this engine holds, or will claim when it is due, ends here: waiters are woken, not polling.

        Only a run another process holds is polled with a short back-off; the rest are read
        again every ``poll_interval`` in case another process takes them after all.
        """
        owner = row["owner"]
        return self._running and (owner == self.worker_id or (owner is None and row["workflow"] in self._workflows))

    def _running_here(self, run_id: str) -> bool:
        return run_id in self._inflight

    def stopped(self, run_ids: list[str], reason: str) -> None:
        for rid in run_ids:
            execution = self._executions.get(rid)
            if execution is not None:
                execution.stop(reason)
            self.notify_finished(rid)

    def on_step_error(self, execution: Execution, step_key: str, error: BaseException) -> None:
        """A step error that carries ``retry_after`` pauses the run's flow-control keys until then."""
        hint = retry_hint(error)
        if hint is None or hint <= 0:
            return
        row = execution.row
        keys = [k for k in (row.get("slot_key"), _pool(row.get("slot_scope"))) if k]
        if not keys:
            return
        until = to_datetime(self.clock.now() + hint)
        for key in keys:
            task = asyncio.ensure_future(self.pause_key(key, until=until, reason=f"retry-after from {step_key}"))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    # -- dispatcher ---------------------------------------------------------------------

    async def _dispatch(self) -> None:
        names = list(self.app.definitions())
        failures = 0
        while self._running:
            self._wake.clear()
            try:
                delay = self.poll_interval  # full, or nothing due is ours: wait for a wake-up, never spin
                free = self._room()
                self._full = free <= 0
                if free > 0:
                    # Claim at once: an empty claim costs what the read that would precede it costs.
                    now = self.clock.now()
                    claimed = await self.store.write(
                        runs.claim_runs, self.worker_id, now, now + self.lease, free, names
                    )
                    for row in claimed:
                        self._launch(row)
                    if len(claimed) == free:
                        continue  # there may be more; the next turn waits for a free slot
                    due = await self.store.read(runs.next_wake, self.worker_id)
                    if due is not None and due > now:
                        delay = min(self.poll_interval, max(0.0, due - self.clock.now()))
                if delay > 0:
                    await self._wake.wait(delay)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                self.store_failed("dispatcher", exc)
                await asyncio.sleep(_backoff(failures, self.poll_interval))
            else:
                failures = 0
                self.store_recovered()

    def _launch(self, row: Row) -> None:
        self._inflight.add(row["id"])
        execution_task = asyncio.create_task(self._execute(row), name=f"lockgate-run-{row['id']}")
        execution_task.add_done_callback(self._slot_freed)

    def _slot_freed(self, _task: asyncio.Task[None]) -> None:
        if self._full:  # the dispatcher waits for room: it may claim again
            self._full = False
            self._wake.set()

    async def _execute(self, row: Row) -> None:
        run_id = row["id"]
        try:
            defn = self.app.get(row["workflow"])
            fence = shared.Fence(run_id, row["owner"], int(row["epoch"]))
            if int(row["reclaim_count"]) >= self.max_reclaims:
                await self._crash_looped(row, fence)
                return
            if not defn.accepts_version(row["version"]):
                error = WorkflowVersionIncompatible(
                    f"run {run_id} was started by version {row['version']!r}; this code is {defn.version!r} "
                    f"(compatible_with: {list(defn.compatible_with)})"
                )
                now = self.clock.now()
                closed = await self.store.write(
                    runs.finish_run,
                    fence,
                    now,
                    status="failed",
                    error_tag="WorkflowVersionIncompatible",
                    error_message=str(error),
                )
                self.after_finish(run_id, closed)
                return
            # Only the run's own held entries write its journal: on its first entry there is none to read.
            journal = [] if int(row["entries"]) <= 1 else await self.store.read(store_journal.load_journal, run_id)
            execution = Execution(self, defn, row, journal)
            self._executions[run_id] = execution
            await execution.run()
            if execution.stop_reason == "lease lost":
                log.warning("run %s: %s; this execution stopped, its late writes refused", run_id, _LOST)
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
            self._executions.pop(run_id, None)
            self._inflight.discard(run_id)

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
        self.notify_finished(row["id"])

    # -- leases -------------------------------------------------------------------------

    async def _renew(self) -> None:
        interval = self.lease / 3
        while self._running:
            await asyncio.sleep(interval)
            now = self.clock.now()
            try:
                held = await self.store.write(workers.renew_leases, self.worker_id, now, now + self.lease)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.store_failed("lease renewal", exc)
                continue
            self.store_recovered()
            for rid, execution in list(self._executions.items()):
                if held.get(rid) != execution.fence.epoch:
                    execution.stop("lease lost")  # logged when the execution ends

    # -- outages ------------------------------------------------------------------------

    def store_failed(self, where: str, exc: BaseException) -> None:
        """A loop's store call failed: an outage is logged once, when it begins; anything else each time.

        The engine's loops (dispatcher, lease renewal, sweeps, hand-backs) report here, and
        ``store_recovered`` after their next success, so an outage reads as two log lines.
        """
        if not isinstance(exc, StoreError):
            log.error("%s failed; retrying", where, exc_info=exc)
            return
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            log.warning("store unavailable (%s: %s); runs are kept and every loop retries with backoff", where, exc)
        else:
            log.debug("store still unavailable (%s: %s)", where, exc)

    def store_recovered(self) -> None:
        """A loop's store call succeeded: if an outage was logged, log its end."""
        if self._outage_since is not None:
            log.warning("store available again after %.1fs", time.monotonic() - self._outage_since)
            self._outage_since = None

    def _hand_back(self, fence: shared.Fence) -> None:
        """Release a run whose execution broke on the store, retrying until the store answers."""

        async def release() -> None:
            failures = 0
            while self._running:
                try:
                    await self.store.write(runs.release_run, fence, self.clock.now())
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    failures += 1
                    self.store_failed(f"hand-back of run {fence.run_id}", exc)
                    await asyncio.sleep(_backoff(failures, self.poll_interval))
                else:
                    self.store_recovered()
                    log.info("run %s: handed back after a store failure; re-entered from its journal", fence.run_id)
                    self._wake.set()
                    return

        task = asyncio.create_task(release(), name=f"lockgate-handback-{fence.run_id}")
        self._handbacks.add(task)
        task.add_done_callback(self._handbacks.discard)

    @property
    def running(self) -> bool:
        """Whether the engine's loops should keep going (false once ``close`` began)."""
        return self._running

    @property
    def executing(self) -> list[str]:
        """Ids of the runs this process has claimed and is executing now."""
        return list(self._inflight)

    @property
    def claiming(self) -> bool:
        """Whether a claimed run has not reached its body yet."""
        return len(self._inflight) != len(self._executions)


_LOST = "lease lost (another worker took the run over, or it was ended elsewhere)"


class _ClaimAtStart:
    """The run a blocking start claims as it creates it (set by ``new_run_row``)."""

    __slots__ = ("row", "run_id")

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.row: Row | None = None  # the run's row as created, when the start knows it (a bare start)


_CLAIM_AT_START: contextvars.ContextVar[_ClaimAtStart | None] = contextvars.ContextVar(
    "lockgate_claim_at_start", default=None
)


class _Wakeup:
    """What the dispatcher sleeps on: ``set()`` from anywhere on the loop; ``wait(timeout)``.

    One future and one timer per sleep: lighter than an ``asyncio.Event`` waited on through
    a task, which the dispatcher would pay for after every start.
    """

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._flag = True
        _resolve(self._waiter)

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    async def wait(self, timeout: float) -> None:
        if self._flag:
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None


def _resolve(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


def _backoff(failures: int, base: float) -> float:
    """Seconds to wait after ``failures`` failed tries in a row: doubling from ``base``, at most 5 s."""
    return float(min(5.0, max(0.05, base) * 2 ** min(failures - 1, 10)))


def _pool(scope: str | None) -> str | None:
    return scope.removeprefix("pool:") if scope and scope.startswith("pool:") else None


# Run columns naming something the gate holds for the run until it ends (a finish wakes the drainer).
_GATE_HOLDS = ("slot_scope", "singleton_key", "on_failure")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
