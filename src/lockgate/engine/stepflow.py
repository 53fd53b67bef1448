"""Step flow control in an execution: a step waits for its key's slot, and ``ctx.rate_limit``.

A flow-controlled step asks the store for a slot before each attempt (``StepGate.enter``)
and frees it when the attempt ends, however it ends (``StepGate.leave``; a process that
dies frees its slots with its lease, see ``store/flow.py``). Refused, the step keeps its
place in the key's line and waits without holding the worker: when the wait is short (a
rate window about to open) in place, else the run parks with ``waiting_on="flow"`` and the
store wakes it when its turn comes. A step with no flow control never reaches this module.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import typing
import weakref
from concurrent.futures import Executor
from typing import Any

from ..clock import to_datetime
from ..definitions import retry_hint
from ..errors import InvalidArgument
from ..flowcontrol import INHERIT, FlowControl, FlowLimits, check_flow_control, check_limits, resolve_flow
from ..store import Store, flow, gate, runs
from ..store.base import Tx
from ..store.coalesce import with_locks
from ..store.shared import Fence
from .durable import Running, Wait, call

__all__ = ["Exempt", "StepGate", "attempt", "current", "gate_for", "park_run", "rate_limit"]

log = logging.getLogger("lockgate.executor")

_OUTSIDE: Any = object()  # not inside a step
_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("lockgate_flow_control", default=_OUTSIDE)
# The (key, declaration) pairs this process has written to each store: a key is declared once per process.
_DECLARED: weakref.WeakKeyDictionary[Store, set[tuple[str, str]]] = weakref.WeakKeyDictionary()
_BACKGROUND: set[asyncio.Future[Any]] = set()


def _limits_of(given: Any, payload: Any) -> FlowLimits | None:
    """The limits ``given`` (stored JSON, a ``FlowControl`` or ``None``) come to for this run."""
    if given is None:
        return None
    if isinstance(given, str):
        return FlowLimits.from_json(given)
    try:
        return resolve_flow(check_flow_control(given), payload)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def gate_for(
    x: Running, given: Any, run_flow: Any, step_key: str, priority: Any, payload: Any
) -> StepGate | Exempt | None:
    """The gate of one ``ctx.step``: ``given`` is its ``flow_control=`` (``INHERIT``: the run's, ``run_flow``)."""
    limits = _limits_of(run_flow if given is INHERIT else given, payload)
    if limits is None:
        return None if run_flow is None else Exempt()
    rank = 0
    if priority is not None:  # the workflow's priority breaks ties in the key's line
        try:
            rank = int(priority(payload))
        except Exception:
            rank = 0
    return StepGate(x, limits, step_key, rank)


def current(run_flow: Any, payload: Any) -> FlowControl | None:
    """``ctx.flow_control``: inside a step, the limits in force for it; elsewhere the run's configuration."""
    value = _CURRENT.get()
    if value is not _OUTSIDE:
        return typing.cast(FlowControl | None, value)
    limits = _limits_of(run_flow, payload)
    return None if limits is None else limits.as_control()


class StepGate:
    """One flow-controlled step of an execution: a slot of its key around each attempt."""

    def __init__(self, x: Running, limits: FlowLimits, step_key: str, priority: int) -> None:
        self._x = x
        self.limits = limits
        self._step_key = step_key
        self._priority = priority
        self.waited: float | None = None  # seconds waited before the first attempt (journaled)
        self._token: contextvars.Token[Any] | None = None

    def _declaration(self) -> dict[str, Any] | None:
        limits = self.limits
        text = limits.to_json()
        seen = _DECLARED.setdefault(self._x.store, set())
        if (limits.key, text) in seen:
            return None
        return {
            "key": limits.key,
            "rate": limits.rate,
            "period": limits.period,
            "parallelism": limits.parallelism,
            "burst": limits.burst,
            "declared": text,
        }

    async def enter(self, block: Any, attempt: int, first: float) -> tuple[int, float]:
        """Hold a slot of the key before ``attempt`` (inside ``busy()``); ``block`` parks the body idle.

        The attempt and the first attempt's start to go on with: a step that parked between two
        attempts is entered again from its first, and its waiting row kept the count.
        """
        x = self._x
        key = self.limits.key
        while True:
            declared = self._declaration()
            try:
                grant = await x.store.write(
                    flow.acquire, declared, key, x.fence, self._step_key, self._priority, x.clock.now, attempt, first
                )
            except LookupError:  # the key's row vanished since this process declared it
                _DECLARED.get(x.store, set()).clear()
                continue
            if declared is not None:
                _DECLARED.setdefault(x.store, set()).add((key, declared["declared"]))
            if grant.granted:
                if grant.on_burst:  # the step analogue of a start's "passed on burst" ledger reason
                    x.event("flow-burst", {"step": self._step_key, "key": key})
                if self.waited is None:
                    self.waited = grant.waited
                    if grant.waited > 0:
                        x.event("flow-waited", {"step": self._step_key, "key": key, "waited": grant.waited})
                self._token = _CURRENT.set(FlowLimits.from_row(grant.limits).as_control())
                if grant.attempt > attempt:
                    return grant.attempt, first if grant.first is None else grant.first
                return attempt, first
            now = x.clock.now()
            if grant.retry_at is not None and grant.retry_at - now <= x.host.inline_sleep:
                await x.clock.sleep_until(grant.retry_at)  # the window opens soon: wait in place
                continue
            await block(Wait("flow", wake_at=grant.retry_at, flow_keys=[key]))

    def back_pressure(self, error: BaseException) -> None:
        """An error that asks to retry later (``RetryAfter``, any ``retry_after``) pauses the key for every run.

        The pause is the gate's own key pause (``key:<key>``): ``workflows pauses`` lists it and
        ``unpause_key`` lifts it. Queued before the slot's release, so that release wakes no one early.
        """
        hint = retry_hint(error)
        if hint is None or hint <= 0:
            return
        x = self._x
        now = x.clock.now()
        until = to_datetime(now + hint)  # to the microsecond, as ``pause_key`` takes it
        reason = f"retry-after from {self._step_key} of {x.run_id}"
        x.store.write_nowait(
            gate.pause, f"key:{self.limits.key}", reason, None if until is None else until.timestamp(), now
        )

    def leave(self) -> None:
        """The attempt ended, however: free its slot (queued at once, before anything the body writes next)."""
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None
        x = self._x
        x.store.write_nowait(_release, self.limits.key, x.run_id, self._step_key, x)


async def _release(tx: Tx, key: str, run_id: str, step_key: str, x: Running) -> None:
    if await flow.release(tx, key, run_id, step_key, x.clock.now()):
        x.host.wake(x.clock.now())  # a woken run is claimed by a write queued after this one


class Exempt:
    """A step of a flow-controlled run given ``flow_control=None``: no key, and ``ctx.flow_control`` is ``None``."""

    waited: float | None = None

    def __init__(self) -> None:
        self._token: contextvars.Token[Any] | None = None

    async def enter(self, block: Any, attempt: int, first: float) -> tuple[int, float]:
        self._token = _CURRENT.set(None)
        return attempt, first

    def back_pressure(self, error: BaseException) -> None:
        pass

    def leave(self) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None


async def attempt(
    step: StepGate | Exempt | None, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], pool: Executor | None = None
) -> Any:
    """One attempt of a step: plain (``step`` is ``None``), or flow-controlled and holding its slot
    (``enter``), which is freed however the attempt ends."""
    if step is None:
        return await call(fn, args, kwargs, pool)
    try:
        return await call(fn, args, kwargs, pool)
    except Exception as exc:
        step.back_pressure(exc)
        raise
    finally:
        step.leave()


async def park_run(tx: Tx, /, fence: Fence, now: float, *, flow_keys: list[str], **park: Any) -> float | None:
    """``runs.park_run`` for a run some of whose steps wait on flow keys: if their turn came meanwhile,
    the run is woken in the same transaction (no release can slip between the two)."""
    woke = await runs.park_run(tx, fence, now, **park)
    due = await flow.wake_waiters(tx, flow_keys, now)
    if due is None:
        return woke
    return due if woke is None else min(woke, due)


async def rate_limit(x: Running, name: str, limit: int, period: Any, key: Any) -> None:
    """``ctx.rate_limit``: take a slot of the sliding window ``name`` (per ``key``), journaled."""
    try:
        rate, seconds, _ = check_limits(limit, period, None)
    except ValueError as exc:
        raise InvalidArgument(f"ctx.rate_limit({name!r}): {str(exc).replace('rate', 'limit', 1)}") from None
    assert rate is not None
    step_key = x.key(f"$rate:{name}")
    entry = x.entry(step_key)
    if entry is not None and entry["status"] == "completed":
        return  # replayed: the slot was taken once
    window = f"$rate:{name}" if key is None else f"$rate:{name}:{key}"
    first: float | None = None
    while True:
        now = x.clock.now()
        first = now if first is None else first

        async def take(tx: Tx) -> None:
            retry = await flow.take_rate_slot(tx, window, rate, seconds, x.clock.now)
            if retry is not None:
                raise _Full(retry)  # nothing of this attempt is kept: no slot, no entry

        async with x.busy():
            try:
                done = {
                    "step_key": step_key,
                    "kind": "rate",
                    "status": "completed",
                    "started_at": first,
                    "flow_wait": now - first,
                }
                await x.record_with(done, take)
                return
            except _Full as full:
                retry_at = full.retry_at
            if retry_at - x.clock.now() <= x.host.inline_sleep:
                await x.clock.sleep_until(retry_at)
                continue
        await x.block(Wait("flow", wake_at=retry_at))


class _Full(Exception):
    def __init__(self, retry_at: float) -> None:
        self.retry_at = retry_at


# A group commit takes the flow keys its calls lock first, in one order (``coalesce.with_locks``).
with_locks(_release, lambda args, kwargs: flow.lock_names([args[0]]))
with_locks(park_run, lambda args, kwargs: flow.lock_names(list(kwargs.get("flow_keys") or ())))
