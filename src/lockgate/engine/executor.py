"""The executor: enters a workflow body, replays its journal, and implements ``Context``.

Replay is by re-execution. A body re-entered after a park, a crash or a redrive runs
from the top; each durable operation whose journal entry exists returns the recorded
value without acting. When every branch of the body is blocked on something only the
outside world can end (a long timer, a signal, an update, a child), the body is
stopped and the run parked: no task, no thread is held until it is woken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random as _random
import typing
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from ..clock import Clock
from ..compensation import CancelRequested, Compensations
from ..controls import FailureReport
from ..crypto import Sealer, is_sealed, open_for_replay
from ..definitions import Retry, WorkflowDef
from ..errors import JournalDecryptionError, ResultTypeError, StepFailed, StoreError, UnstorableValue
from ..events import Subject
from ..flowcontrol import INHERIT
from ..gate.handoff import finish_passing
from ..serde import conform, decode, decode_as, encode, refuse_unstorable, validate_payload
from ..store import Store, runs, shared
from ..store import journal as store_journal
from ..store.base import Row
from . import durable, run_events, stepflow, streams
from .callbacks import TokenOperations
from .cancelling import CancelState
from .children import take_back
from .durable import Host, Parked, Wait, attempt_row, callable_facts, describe, divergence, kept_input, seen, step_entry
from .forwarding import Forwarding

__all__ = ["Execution", "Host"]

log = logging.getLogger("lockgate.executor")
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_NO_RETRY = Retry(max_attempts=1, jitter=False)
HOLD = 0.05
"""Seconds a completed step's journal entry waits for the run's next write to carry it before it is written alone."""


class _Busy:
    """``async with execution.busy()``: the body is doing something only it can finish."""

    __slots__ = ("_execution",)

    def __init__(self, execution: Execution) -> None:
        self._execution = execution

    async def __aenter__(self) -> None:
        execution = self._execution
        execution._busy += 1
        if execution._held or execution._flushing is not None:
            try:
                await execution._flush()
            except BaseException:
                execution._busy -= 1
                raise

    async def __aexit__(self, *exc: object) -> None:
        execution = self._execution
        execution._busy -= 1
        if execution._busy == 0 and execution._waits:
            execution._poke()


class Execution(TokenOperations, Forwarding):
    """One entry into one run's body on this worker."""

    def __init__(self, host: Host, defn: WorkflowDef, row: Row, journal: list[Row]) -> None:
        self._host = host
        self._store = host.store
        self._clock = host.clock
        self.defn = defn
        self.row = row
        self.run_id = row["id"]
        self.workflow = row["workflow"]
        self.attempt = int(row["entries"])
        self.fence = shared.Fence(row["id"], row["owner"], int(row["epoch"]))
        self._patches = set(decode(row["patches"]) or [])
        journal, self.cancel = CancelState.of(journal)  # a compensating cancel: engine/cancelling.py
        self._journal: dict[str, Row] = {e["step_key"]: e for e in journal}
        self._recorded = [e["step_key"] for e in journal]
        self._unreached = len(self._journal)  # recorded entries this entry has not reached yet
        self._next_seq = max((int(e["seq"]) for e in journal), default=-1) + 1
        self._occurrences: Counter[str] = Counter()
        self._reached: set[str] = set()
        self._extra: list[str] = []
        self._confirmed = 0  # how many extras came before a recorded key: inserted into recorded history
        self._busy = 0
        self.attempting = 0  # step attempts running now (a graceful shutdown lets them finish)
        self._busy_cm = _Busy(self)
        self._waits: list[Wait] = []
        self._attention: asyncio.Future[None] | None = None
        self._random: _random.Random | None = None
        self.task: asyncio.Task[Any] | None = None
        self.stop_reason: str | None = None
        self._coarse = row["recording"] == "coarse"
        self._progress_at = float(row["progress_at"])  # the run's stored progress_at: only its holder moves it
        self._held: list[store_journal.Entry] = []  # completed steps' entries not written yet (see ``_settle``)
        self._held_since = 0.0  # the event loop's time when the oldest held entry was held
        self._hold_timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Future[None] | None = None  # held entries written alone, not yet durable
        # An encrypted run's values are sealed as they are written and opened as they are read;
        # any other run has no sealer, and each write site pays one attribute test.
        sealed = defn.encrypt_steps or is_sealed(row["payload"])
        self._sealer: Sealer | None = Sealer(host.keyring, self.run_id) if sealed else None
        self._scopes: frozenset[str] = frozenset()  # asked of Engine(resolve_scopes=) as the body is entered
        self._observer = host.observer  # metrics and traces of step attempts (None: nothing to report)
        self.outcome = "stopped"  # how this entry ended: a status, "parked" or "stopped" (observer.RunOutcome)
        self._run_flow: Any = row.get("flow_control") or defn.options.flow_control  # None: no step flow control
        self._payload: Any = None

    # -- running the body ----------------------------------------------------------------

    async def run(self) -> None:
        """Enter the body and see it through to a park, a finish or a stop."""
        text = self.row["payload"]
        if self._sealer is not None or "$sealed" in text:
            try:
                text = self._open_stored(text)
            except JournalDecryptionError as exc:
                await self._undecryptable(exc)
                return
        # A payload stored before a deploy changed its model raises a typed PayloadError here: the
        # entry fails, the run is handed back and, entered again and again, ends crash-looped
        # (suspended) for an operator, its journal kept for when a fixed deploy resumes it.
        payload = self._payload = validate_payload(self.defn.payload_model, text, what=f"run {self.run_id} payload")
        if not await take_back(self, self.defn):  # a parent that gave its slot back waits for one
            return
        if self._host.resolve_scopes is not None:  # asked each attempt; none without a resolver
            self._scopes = await run_events.scopes(self._host.resolve_scopes, self.subject)
        loop = asyncio.get_running_loop()
        self.task = asyncio.ensure_future(self.defn.fn(self, payload))
        self.task.add_done_callback(self._poke)
        while not self.task.done():
            if not self._is_blocked():
                # Woken only when the body ends or may have become blocked (a wait began, or
                # the last operation in flight ended beside one), not after every step.
                self._attention = loop.create_future()
                try:
                    await self._attention
                finally:
                    self._attention = None
                if self.task.done() or not self._is_blocked():
                    continue
            for _ in range(3):  # let synchronous continuations reach their next await
                await asyncio.sleep(0)
            if self._is_blocked() and not self.task.done():
                await self._park()
                return
        await self._finish()

    def _open_stored(self, text: str) -> str:
        """The run's payload in clear, its journal opened: what an encrypted run replays from."""
        report = issubclass(self.defn.payload_model, FailureReport)
        text, self._sealer, self._journal = open_for_replay(
            self._host.keyring, self.row, text, self._journal, self._sealer, report=report
        )
        return text

    async def _undecryptable(self, exc: JournalDecryptionError) -> None:
        """Suspend a run whose stored values do not open: running its steps again blindly could repeat effects."""
        log.error("%s; the run is suspended", exc)
        message = str(exc)  # names the run and the key, never the value
        event = {"error_tag": type(exc).__name__, "error_message": message, "reason": "decryption"}
        await self._end(self._clock.now(), "suspended", tag=type(exc).__name__, message=message, event=event)

    def _is_blocked(self) -> bool:
        return self._busy == 0 and bool(self._waits)

    def _poke(self, *_: object) -> None:
        attention = self._attention
        if attention is not None and not attention.done():
            attention.set_result(None)

    # -- what the durable operations use (``durable.Running``) ----------------------------

    @property
    def host(self) -> Host:
        return self._host

    @property
    def store(self) -> Store:
        return self._store

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def rng(self) -> _random.Random:
        if self._random is None:  # seeding costs tens of microseconds; most runs never draw
            self._random = _random.Random()
        return self._random

    @property
    def sealer(self) -> Sealer | None:
        return self._sealer

    def entry(self, key: str) -> Row | None:
        return self._journal.get(key)

    async def _park(self) -> None:
        assert self.task is not None
        waits = list(self._waits)
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        timers = [w.wake_at for w in waits if w.wake_at is not None]
        wake_at = min(timers) if timers else None
        kinds = [w.kind for w in waits]
        waiting_on = next((k for k in ("update", "signal", "child", "timer") if k in kinds), kinds[0])
        names = sorted({n for w in waits for n in w.names})
        flow_keys = sorted({k for w in waits for k in w.flow_keys})
        children = sorted({c for w in waits for c in w.children})
        models = {k: v for w in waits for k, v in w.models.items()}
        give_back = "child" in kinds and self.row.get("slot_scope") is not None  # children.py: no deadlock
        self._tripwire(parked=True)
        try:
            await self._flushed()
            woke = await stepflow.park(
                self._store,
                self.fence,
                self._clock.now(),
                flow_keys=flow_keys,
                wake_at=wake_at,
                waiting_on=waiting_on,
                names=names,
                children=children,
                models=models,
                entries=self._take_held(),
                give_back=give_back,
                hooks=[w.on_park for w in waits if w.on_park is not None],
                events=[e for w in waits for e in w.events],
            )
        except shared.Fenced:
            return
        self.outcome = "parked"
        self._host.wake(None if give_back else woke)  # a slot given back: the drainer admits who is next

    async def _finish(self) -> None:
        assert self.task is not None
        now = self._clock.now()
        try:
            value = self.task.result()
        except (asyncio.CancelledError, shared.Fenced, Parked):
            return  # stopped from outside (cancel, suspend, lost lease, shutdown)
        except StoreError:
            self._take_held()  # whoever takes the run next runs those steps again
            raise  # the store failed under the body, not the body: the engine hands the run back
        except JournalDecryptionError as exc:
            self._take_held()
            await self._undecryptable(exc)
            return
        except (Exception, CancelRequested) as exc:  # a compensating cancel ends cancelled, its compensations run
            if self.cancel.ends_cancelled(exc) or not isinstance(exc, Exception):
                await self._end(now, "cancelled", **self.cancel.ending())
            else:
                await self._fail(exc)
            return
        if self.cancel.ends_cancelled(None):  # cancelled while its last steps ran: it ends cancelled all the same
            await self._end(now, "cancelled", **self.cancel.ending())
            return
        try:
            value = conform(value, self.defn.result_type, workflow=self.workflow)
            refuse_unstorable(value, f"workflow {self.workflow!r} result")
        except (ResultTypeError, UnstorableValue) as exc:  # checked before the run ends: no caller meets a bad result
            await self._fail(exc)
            return
        self._tripwire(parked=False)
        output = encode(value, self.defn.result_type)
        if self._sealer is not None:
            output = self._sealer.seal("", "output", output)
        await self._end(now, "succeeded", output=output)

    async def _fail(self, exc: Exception) -> None:
        tag, message = describe(exc)
        clear = message
        if self._sealer is not None:
            message = self._sealer.seal("", "error", message)
        self._tripwire(parked=False)
        now = self._clock.now()
        undone = tag == "CompensationFailed"  # an undo left half done is never failed for good: suspended
        status = "suspended" if self.defn.suspend_on_failure or undone else "failed"
        why = "compensation" if undone else "failure" if status == "suspended" else None
        event = {"error_tag": tag, "error_message": message, "reason": why}
        if not await self._end(now, status, tag=tag, message=message, event=event):
            return
        if status == "failed" and issubclass(self.defn.payload_model, FailureReport):
            # there is no on_failure for an on_failure: the log is where a failing handler is seen
            log.error("failure handler %s (run %s) failed: %s: %s", self.defn.name, self.run_id, tag, clear)

    async def _end(
        self,
        now: float,
        status: str,
        *,
        output: str | None = None,
        tag: str | None = None,
        message: str | None = None,
        event: dict[str, Any] | None = None,
    ) -> bool:
        """Write the run's end (passing its concurrency slot on where it can); ``False``: the lease was lost."""
        children = any(entry.get("kind") == "child" for entry in self._journal.values())
        handoff = None if children else await self._host.hand_off(self.defn, self.row, status)
        end: dict[str, Any] = {"status": status, "output": output, "error_tag": tag, "error_message": message}
        passed = None
        try:
            await self._flushed()
            end["entries"] = self._take_held()
            if handoff is None:
                plain = runs.ends_plainly(self.row, status, started_children=children)
                stopped = await self._store.write(runs.finish_run, self.fence, now, event=event, plain=plain, **end)
            else:
                passed = await self._store.write(finish_passing, self.fence, now, handoff, event=event, **end)
                stopped = passed.stopped
        except shared.Fenced:
            return False
        self.outcome = status
        ended = self._ended(status, output, tag, message)
        self._host.after_finish(self.run_id, stopped, ended, settled=passed is not None and passed.settled)
        if passed is not None:
            self._host.passed(passed)
        return True

    def _ended(self, status: str, output: str | None, tag: str | None, message: str | None) -> Row:
        """The outcome columns of the row ``finish_run`` just wrote (what a result waiter needs), and its source."""
        ended = {"id": self.run_id, "workflow": self.workflow, "status": status, "output": output}
        return {**ended, "error_tag": tag, "error_message": message, "source": self.row.get("source")}

    def stop(self, reason: str) -> None:
        """Stop the body from outside (cancel, suspend, lost lease, shutdown); nothing more is written."""
        if self.cancel.told(reason):  # a compensating cancel: the body stops at its next new operation
            return
        self.stop_reason = reason
        held = self._take_held()
        if held and reason == "shutdown":  # the run is handed back: its completed steps stay done
            self._store.write_nowait(store_journal.record_entries, self.fence, held)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    # -- bookkeeping ---------------------------------------------------------------------

    def key(self, name: str) -> str:
        n = self._occurrences[name]
        self._occurrences[name] = n + 1
        key = f"{name}#{n}"
        self._reached.add(key)  # each key is made once per entry: occurrences only count up
        if key in self._journal:
            self._unreached -= 1
            self._confirmed = len(self._extra)
        elif self._unreached:
            self._extra.append(key)
        if self.cancel.reason is not None:
            self.cancel.check(key in self._journal)
        return key

    def _seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _tripwire(self, *, parked: bool) -> None:
        if not self._recorded or len(self._recorded) > self._host.replay_shape_limit:
            return  # past the limit, a history read in part would raise its own false alarms
        # new keys past the last recorded one are the body going further than before, as expected
        data = divergence(self._recorded, self._reached, self._extra[: self._confirmed], self._journal, parked=parked)
        if data is not None:
            self.event("nondeterminism-suspected", data)

    def event(self, type_: str, data: dict[str, Any] | None = None) -> None:
        now = self._clock.now()
        self._store.write_nowait(shared.add_event, self.run_id, type_, now, data)

    def busy(self) -> _Busy:
        return self._busy_cm

    async def block(self, wait: Wait) -> typing.NoReturn:
        """Wait for something only the outside world ends; the run parks meanwhile."""
        self.cancel.check()
        self._waits.append(wait)
        self._poke()
        try:
            await asyncio.Future()  # never resolved: the body is cancelled at park
        finally:
            self._waits.remove(wait)
        raise Parked()

    async def _block_idle(self, wait: Wait) -> typing.NoReturn:
        """``block`` from inside ``busy()`` (a step waiting for its flow-control key is not busy)."""
        self._busy -= 1
        try:
            await self.block(wait)
        finally:
            self._busy += 1

    async def record(
        self, entry: dict[str, Any], *, message: dict[str, Any] | None = None, attempt: dict[str, Any] | None = None
    ) -> None:
        now = self._clock.now()
        entry = {"seq": self._seq(), **entry}
        touch = self._touch_due(now)
        try:
            await self._store.write(
                store_journal.record_entry, self.fence, entry, now, progress=touch, message=message, attempt=attempt
            )
        except shared.Fenced:
            self.stop("lease lost")
            raise
        if touch:
            self._progress_at = now
        self._journal[entry["step_key"]] = entry

    async def record_with(self, entry: dict[str, Any], before: Callable[[Any], Awaitable[T]]) -> T:
        async def both(tx: Any) -> tuple[dict[str, Any], T]:
            return entry, await before(tx)  # the caller's dict: what ``before`` learns in the transaction goes in too

        return await self.record_if(both)

    async def record_if(self, before: Callable[[Any], Awaitable[tuple[dict[str, Any] | None, T]]]) -> T:
        now, seq = self._clock.now(), self._seq()  # a seq left unused (nothing journaled) is a gap: it only sorts
        touch = self._touch_due(now)
        written: list[dict[str, Any]] = []

        async def write(tx: Any) -> T:
            entry, result = await before(tx)
            written[:] = [] if entry is None else [{**entry, "seq": seq}]  # asked again if the batch runs again
            if written:
                await store_journal.record_entry(tx, self.fence, written[0], now, progress=touch)
            return result

        try:
            result = await self._store.write(write)
        except shared.Fenced:
            self.stop("lease lost")
            raise
        if written:
            self._progress_at = now if touch else self._progress_at
            self._journal[written[0]["step_key"]] = written[0]
        return result

    def _touch_due(self, now: float) -> bool:
        """Whether a journal write should move the run's ``progress_at`` too (at most once a resolution)."""
        return now - self._progress_at >= store_journal.PROGRESS_RESOLUTION

    async def _settle(self, entry: dict[str, Any], attempt: dict[str, Any] | None) -> None:
        """Journal a step's outcome; when nothing else of the body is in flight, with the run's next write.

        The entry is then held back, and written by whatever the run writes next: its end or
        its park in the same commit, or before the next operation begins (which may act on
        the world, so it must know this step done), or alone after ``HOLD`` seconds. A
        one-step run thus ends in one commit. A crash before then runs the step again, as a
        crash just before its entry's commit would: steps run at least once either way.
        """
        if self._busy > 1:  # another step of the body is running: this one must stay done whatever happens to it
            await self.record(entry, attempt=attempt)
            return
        entry = {"seq": self._seq(), **entry}
        if not self._held:
            self._held_since = asyncio.get_running_loop().time()
            if self._hold_timer is None:  # one timer for many holds: a run of steps does not arm one each
                self._hold_timer = asyncio.get_running_loop().call_later(HOLD, self._hold_expired)
        self._held.append(store_journal.Entry(entry, self._clock.now(), attempt))
        self._journal[entry["step_key"]] = entry

    def _take_held(self) -> list[store_journal.Entry]:
        held, self._held = self._held, []
        return held

    def _hold_expired(self) -> None:
        self._hold_timer = None
        if not self._held or self._flushing is not None:
            return
        loop = asyncio.get_running_loop()
        left = self._held_since + HOLD - loop.time()
        if left > 0:  # held since the timer was armed for an earlier hold
            self._hold_timer = loop.call_later(left, self._hold_expired)
            return
        self._flushing = asyncio.ensure_future(self._write_held())
        self._flushing.add_done_callback(seen)  # its failure reaches whoever waits for it next, if anyone

    async def _write_held(self) -> None:
        now = self._clock.now()
        touch = self._touch_due(now)
        await self._store.write(
            store_journal.record_entries, self.fence, self._take_held(), progress=now if touch else None
        )
        if touch:
            self._progress_at = now

    async def _flushed(self) -> None:
        """Wait for held entries already being written alone (``Fenced`` if the lease was lost)."""
        flushing = self._flushing
        if flushing is None:
            return
        try:
            await asyncio.shield(flushing)
        finally:
            if flushing.done() and self._flushing is flushing:
                self._flushing = None

    async def _flush(self) -> None:
        """Have every held entry durable: an operation that may act on the world is about to begin."""
        try:
            if self._flushing is not None:
                await self._flushed()
            if self._held:
                await self._write_held()
        except shared.Fenced:
            self.stop("lease lost")
            raise

    # -- Context: steps ------------------------------------------------------------------

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
        if not callable(fn):
            raise TypeError(f"ctx.step({name!r}, ...): fn must be callable, got {type(fn).__name__}")
        key = self.key(name)
        rtype, is_async = callable_facts(fn)
        entry = self._journal.get(key)
        if entry is not None and entry["status"] == "completed":
            return decode_as(entry["output"], rtype, workflow=self.workflow, where=f"step {key}")
        if entry is not None and entry["status"] == "failed":
            raise StepFailed(name, entry["error_tag"], entry["error_message"], int(entry["attempts"]))
        policy = retry or _NO_RETRY
        gate = None
        if flow_control is not INHERIT or self._run_flow is not None or cost is not None or settle is not None:
            weights = (cost, settle, args, kwargs)
            gate = stepflow.gate_for(self, flow_control, self._run_flow, key, self.defn.gate, self._payload, weights)
        async with self.busy():
            first = self._clock.now()
            attempt = 0
            recorded_input = None if input is None or self._coarse else kept_input(input, self._host.input_limit)
            if recorded_input is not None and self._sealer is not None:
                recorded_input = self._sealer.seal(key, "input", recorded_input)
            while True:
                attempt += 1
                if gate is not None:  # a slot of its key before each attempt: its store errors are no step's
                    attempt, first = await gate.enter(self._block_idle, attempt, first)
                started = first if attempt == 1 else self._clock.now()
                if self._host.draining:  # shutdown: this attempt waits for the next worker (stop cancels it)
                    await asyncio.get_running_loop().create_future()
                self.attempting += 1
                streaming = streams.STEP.set((key, attempt))  # what a ctx.stream inside the attempt names
                try:
                    try:
                        if gate is None and is_async:  # the common step: nothing between journal and function
                            body = fn(*args, **kwargs)
                        else:
                            body = stepflow.attempt(gate, fn, args, kwargs, self._host.step_pool)
                        if self._observer is None:
                            result = await body
                        else:
                            with self._observer.step_attempt(self.workflow, self.run_id, name, attempt):
                                result = await body
                        refuse_unstorable(result, f"step {name!r} result")  # a NaN fails the attempt, not as null
                    finally:
                        self.attempting -= 1  # the attempt ended: a shutdown waits for this
                        streams.STEP.reset(streaming)
                except (asyncio.CancelledError, shared.Fenced, Parked):
                    raise
                except Exception as exc:
                    streams.attempt_failed(self, key, attempt)  # readers drop what the failed attempt streamed
                    tag, message = describe(exc)
                    stored = message if self._sealer is None else self._sealer.seal(key, "error", message)
                    tried = self._attempt_row(key, attempt, started, recorded_input, tag, stored)
                    delay = policy.after_failure(attempt, exc, self.rng, self._clock.now() - first)
                    if delay is None:
                        waited = None if gate is None else gate.waited
                        failed = step_entry(key, "failed", attempt, first, waited, error_tag=tag, error_message=stored)
                        await self._settle(self.cancel.entry(failed), tried)
                        raise StepFailed(name, tag, message, attempt) from exc
                    if tried is not None:  # introspection: the retry does not wait for it
                        self._store.write_nowait(store_journal.add_attempt, tried)
                    self._host.on_step_error(self, key, exc)
                    await self._clock.sleep_until(self._clock.now() + delay)
                    continue
                output = durable.step_output(name, result, rtype)
                if self._sealer is not None:
                    output = self._sealer.seal(key, "output", output)
                waited = None if gate is None else gate.waited
                await self._settle(
                    self.cancel.entry(step_entry(key, "completed", attempt, first, waited, output=output)),
                    # A first attempt that completes the step is recorded by the journal entry alone.
                    None
                    if attempt == 1 and recorded_input is None
                    else self._attempt_row(key, attempt, started, recorded_input),
                )
                return result

    def _attempt_row(
        self, key: str, attempt: int, started: float, input_: str | None, tag: str | None = None, msg: str | None = None
    ) -> dict[str, Any] | None:
        """The attempt's introspection row (``None`` when recording coarsely)."""
        if self._coarse:
            return None
        return attempt_row(self.run_id, key, attempt, started, self._clock.now(), input_, tag, msg)

    def compensations(self) -> Compensations:  # a block whose exit is replayed was done with: no cancel reaches it
        return Compensations(self.step, self.cancel.undoing, lambda: None if self._unreached else self.cancel.reason)

    # -- Context: what is not forwarded (forwarding.py forwards the durable operations) ------

    @property
    def running(self) -> Execution:
        return self

    def patch(self, marker: str) -> bool:
        return marker in self._patches

    @property
    def subject(self) -> Subject:
        return run_events.subject(self.row)

    @property
    def scopes(self) -> frozenset[str]:
        return self._scopes

    stream = streams.stream  # ctx.stream (engine/streams.py)

    def settle(self, units: int) -> None:
        stepflow.settle(units)

    @property
    def flow_control(self) -> Any:
        return stepflow.current(self._run_flow, self._payload)
