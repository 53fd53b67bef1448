"""Step flow control in an execution: a step waits for its key's slot, and ``ctx.rate_limit``.

A flow-controlled step asks the store for a slot before each attempt (``StepGate.enter``)
and frees it when the attempt ends, however it ends (``StepGate.leave``; a process that
dies frees its slots with its lease, see ``store/flow.py``). Refused, the step keeps its
place in the key's line. Near the head of the line it waits in place for the slot: the
transaction that frees one hands it to the first waiter, and this process starts that step
as the transaction commits (``Waiters``; a hand-off by another process arrives as a
notification, or at the next look). Further back, or for a rate window that opens later
than ``inline_sleep``, the run parks with ``waiting_on="flow"`` and the store wakes it when
it nears its turn. A step with no flow control never reaches this module.

Under a weighted key (``FlowControl(cost=)``) a step reserves its cost in units when it is
admitted; what it settles (``ctx.settle`` inside it, or ``settle=`` of its result) is written with
its slot's release and counts in the window in the reservation's place.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import typing
import weakref
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from ..clock import to_datetime
from ..definitions import retry_hint
from ..errors import CostExceedsRate, InvalidArgument, StoreError
from ..flowcontrol import (
    INHERIT,
    FlowControl,
    FlowLimits,
    check_cost,
    check_flow_control,
    check_limits,
    check_settled,
    resolve_flow,
)
from ..plan import GatePlan
from ..store import Store, flow, flow_rate, gate, runs
from ..store.base import Tx
from ..store.coalesce import Args, with_locks, with_many
from ..store.flow_line import join_line
from ..store.shared import Fence
from .durable import Running, Wait, call
from .flow_holds import LocalHolds, local_holds
from .flow_waiters import EVICTED, RECHECK, deliver, undeliver, waiters

__all__ = [
    "Exempt",
    "StepGate",
    "attempt",
    "current",
    "gate_for",
    "park",
    "park_run",
    "rate_limit",
    "settle",
]

log = logging.getLogger("lockgate.executor")

_OUTSIDE: Any = object()  # not inside a step
_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("lockgate_flow_control", default=_OUTSIDE)
_RESERVED: contextvars.ContextVar[Reservation | None] = contextvars.ContextVar("lockgate_reserved", default=None)
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
    x: Running,
    given: Any,
    run_flow: Any,
    step_key: str,
    plan: GatePlan,
    payload: Any,
    weights: tuple[Any, Any, tuple[Any, ...], dict[str, Any]],
) -> StepGate | Exempt | None:
    """The gate of one ``ctx.step``: ``given`` is its ``flow_control=`` (``INHERIT``: the run's, ``run_flow``),
    ``plan`` the workflow's (its ``priority`` breaks ties in the key's line);
    ``weights``: its ``cost=`` and ``settle=`` (``None`` each when not given) and the step's arguments."""
    control = run_flow if given is INHERIT else given
    limits = _limits_of(control, payload)
    cost, settle_with, args, kwargs = weights
    if limits is None or not limits.weighted:
        for field, value in (("cost", cost), ("settle", settle_with)):
            if value is not None:
                what = "no flow key" if limits is None else f"flow key {limits.key!r}, which counts calls"
                raise InvalidArgument(f"ctx.step(..., {field}=): the step runs under {what} (give FlowControl a cost)")
        if limits is None:
            return None if run_flow is None else Exempt()
    rank, priority = 0, plan.priority
    if priority is not None:  # the workflow's priority breaks ties in the key's line
        try:
            rank = int(priority(payload))
        except Exception:
            rank = 0
    gate = StepGate(x, limits, step_key, rank)
    if limits.weighted:
        declared = control if isinstance(control, FlowControl) else limits.as_control(limits.cost)
        gate.units = _units(limits, declared.cost if cost is None else cost, cost is not None, args, kwargs)
        gate.settle_with = declared.settle if settle_with is None else settle_with
        if gate.settle_with is not None and not callable(gate.settle_with):
            raise InvalidArgument(
                f"ctx.step(..., settle=): must be a callable of the step's result, got {settle_with!r}"
            )
    return gate


def _units(limits: FlowLimits, cost: Any, given: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """A weighted step's reservation: ``cost`` (ctx.step's own if ``given``, else the key's), checked."""
    field = "ctx.step(..., cost=)" if given else "flow_control.cost"
    if callable(cost) and not given:
        try:
            cost = cost(*args, **kwargs)
        except Exception as exc:
            raise InvalidArgument(f"{field}: callback raised {type(exc).__name__}: {exc}") from None
    try:
        units = check_cost(cost, field)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    assert limits.rate is not None
    if units > limits.rate:
        raise CostExceedsRate(limits.key, units, limits.rate, limits.period)
    return units


class Reservation:
    """A weighted step's attempt: the start holding its units, and what it settled at (``None``: not yet)."""

    def __init__(self, units: int) -> None:
        self.units = units
        self.start: int | None = None
        self.settled: int | None = None


def settle(units: Any) -> None:
    """``ctx.settle``: the units the step's call really used, written with its slot's release."""
    reserved = _RESERVED.get()
    if reserved is None:
        raise InvalidArgument("ctx.settle: no reservation to settle (call it inside a step under a weighted flow key)")
    try:
        reserved.settled = check_settled(units, "ctx.settle")
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


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
        self.units: int | None = None  # a weighted key: the units each attempt reserves
        self.settle_with: Any = None  # a weighted key: the callable of the result that settles them
        self._reserved: Reservation | None = None
        self._reserved_token: contextvars.Token[Reservation | None] | None = None
        self._recheck = 2 * RECHECK  # deep in line on PostgreSQL: how long until it asks again
        self._since: float | None = None  # when it first waited in place
        self._parallelism: int | None = None  # the key's, as the grant declared it
        self._local: LocalHolds | None = None  # where the attempt is counted among the key's steps executing here

    def _declaration(self) -> dict[str, Any] | None:
        limits = self.limits
        text = limits.declaration()
        seen = _DECLARED.setdefault(self._x.store, set())
        if (limits.key, text) in seen:
            return None
        return {
            "key": limits.key,
            "rate": limits.rate,
            "period": limits.period,
            "parallelism": limits.parallelism,
            "burst": limits.burst,
            "weighted": limits.weighted,
            "declared": text,
        }

    async def enter(self, block: Any, attempt: int, first: float) -> tuple[int, float]:
        """Hold a slot of the key before ``attempt`` (inside ``busy()``); ``block`` parks the body idle.

        The attempt and the first attempt's start to go on with: a step that parked between two
        attempts is entered again from its first, and its waiting row kept the count.
        """
        x = self._x
        key = self.limits.key
        handed: flow.Grant | None = None
        # The first ask may join the line without a decision (``flow_line``): not a weighted or a burst key's, and
        # not in a run back from a flow park (its steps have their places: they ask).
        joins = self.units is None and self.limits.parallelism is not None and self.limits.burst is None
        joins = joins and x.row.get("waiting_on") != "flow"
        while True:
            if handed is not None and handed.granted:
                grant = handed
            else:
                asked = asyncio.get_running_loop().time()
                may_wait = x.host.room_to_wait(len(waiters(x.store).deep), key)
                asked_grant = await self._ask(attempt, first, may_wait, joins)
                if asked_grant is None:
                    continue
                grant, joins = asked_grant, False
            handed = None
            if grant.over:
                limits = FlowLimits.from_row(grant.limits)
                raise CostExceedsRate(key, self.units or 0, limits.rate or 0, limits.period)
            if grant.granted:
                if grant.on_burst:  # the step analogue of a start's "passed on burst" ledger reason
                    x.event("flow-burst", {"step": self._step_key, "key": key})
                if self.waited is None:
                    self.waited = grant.waited
                    if grant.waited > 0:
                        x.event("flow-waited", {"step": self._step_key, "key": key, "waited": grant.waited})
                granted = FlowLimits.from_row(grant.limits)
                self._parallelism = granted.parallelism
                self._token = _CURRENT.set(granted.as_control(self.units))
                if self.units is not None:
                    self._reserved = Reservation(self.units)
                    self._reserved.start = grant.start
                    self._reserved_token = _RESERVED.set(self._reserved)
                if grant.attempt > attempt:
                    return grant.attempt, first if grant.first is None else grant.first
                return attempt, first
            now = x.clock.now()
            if grant.retry_at is not None and grant.retry_at - now <= x.host.inline_sleep:
                handed = await self._wait_here(asked, until=grant.retry_at)  # the window opens soon: wait in place
                continue
            if grant.retry_at is None and (grant.near or (grant.moving and may_wait)):
                handed = await self._wait_here(asked, near=grant.near)
                if handed is EVICTED:  # its worker needs the place for a run due: park, back near the turn
                    await _block_until(x, block, Wait("flow", flow_keys=[key]), x.clock.now() + RECHECK)
                    handed = None
                    continue
                if handed is not None and not handed.granted and handed.retry_at is not None:
                    if handed.retry_at - x.clock.now() <= x.host.inline_sleep:
                        asked = asyncio.get_running_loop().time()
                        handed = await self._wait_here(asked, until=handed.retry_at)
                        continue
                    handed = None
                continue
            # Parked when every branch waits; a sibling that keeps the run busy (a step of it waiting in place
            # behind this one) would keep it from parking for good: it looks again in a while (``_block_until``).
            wait = Wait("flow", wake_at=grant.retry_at, flow_keys=[key])
            at = grant.retry_at if grant.retry_at is not None else x.clock.now() + RECHECK
            await _block_until(x, block, wait, at)

    async def _ask(self, attempt: int, first: float, may_wait: bool, joins: bool) -> flow.Grant | None:
        """Ask the store for a slot (``flow.acquire``), or join the line behind a step of this worker waiting
        in place for the key (``flow_line.join_line``); ``None``: ask again (the key's row vanished)."""
        x = self._x
        key, step, priority = self.limits.key, self._step_key, self._priority
        declared = self._declaration()
        try:
            if joins and declared is None and may_wait and waiters(x.store).holds(key):
                args: tuple[Any, ...] = (key, x.fence, step, priority, x.clock.now, attempt, first, x.host.inline_sleep)
                grant = await x.store.write(join_line, *args)
            else:
                args = (declared, key, x.fence, step, priority, x.clock.now, attempt, first, self.units, may_wait)
                grant = await x.store.write(flow.acquire, *args, x.host.inline_sleep)
        except LookupError:  # the key's row vanished since this process declared it
            _DECLARED.get(x.store, set()).clear()
            return None
        if declared is not None:
            _DECLARED.setdefault(x.store, set()).add((key, declared["declared"]))
        deliver(x.store, grant.handed)
        if grant.woke:
            x.host.wake(x.clock.now())
        return grant

    async def _wait_here(self, asked: float, near: bool = True, until: float | None = None) -> flow.Grant | None:
        """Wait in place for a slot handed over (its grant), news to ask again on (``None``), or ``RECHECK``
        (further back in line on PostgreSQL: twice that, then twice as long at each look without news, up to 8x);
        with ``until`` (the key's window opens then), until then instead of ``RECHECK``."""
        x = self._x
        here = waiters(x.store)
        if self._since is None:
            self._since = asked
        future = here.wait(self.limits.key, x.run_id, self._step_key, x.fence.owner, asked, self._since, deep=not near)
        # Deep in line on PostgreSQL, news comes as a notification: the look is a fallback, and backs off.
        backs_off = not near and x.store.dialect == "postgres"
        recheck = self._recheck if backs_off else RECHECK
        try:
            if until is not None:
                timer: asyncio.Future[Any] = asyncio.ensure_future(x.clock.sleep_until(until))
                either: list[asyncio.Future[Any]] = [future, timer]
                try:
                    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    timer.cancel()
                return future.result() if future.done() else None
            async with asyncio.timeout(recheck):  # never wait_for: on 3.11 it may turn a cancel into a timeout
                handed = await future
            self._recheck = 2 * RECHECK
            return handed
        except TimeoutError:
            if backs_off:
                self._recheck = min(recheck * 2, 8 * RECHECK)
            return None
        finally:
            here.done(x.run_id, self._step_key)

    async def hold_here(self) -> None:
        """Count the attempt among the key's steps executing in this process, once fewer than its
        parallelism do (``flow_holds``: only a store that forgot slots it granted makes this wait)."""
        if self._parallelism is None:
            return
        holds = local_holds(self._x.store)
        key = self.limits.key
        if not holds.try_take(key, self._parallelism):
            await holds.take(key, self._parallelism, f"step {self._step_key} of {self._x.run_id}")
        self._local = holds

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

    def settle_result(self, result: Any) -> None:
        """``settle=``: the units the call used, from its result (a bad answer fails the attempt, typed);
        a step that settled itself (``ctx.settle``) is settled already."""
        if self.settle_with is None or self._reserved is None or self._reserved.settled is not None:
            return
        try:
            used = self.settle_with(result)
        except Exception as exc:
            raise InvalidArgument(f"settle: callback raised {type(exc).__name__}: {exc}") from None
        try:
            self._reserved.settled = check_settled(used, "settle")
        except ValueError as exc:
            raise InvalidArgument(f"{exc} (as the settle callable answered)") from None

    def leave(self) -> None:
        """The attempt ended, however: free its slot (queued at once, before anything the body writes next),
        with the units a weighted call settled at, if it did."""
        if self._local is not None:
            self._local.give(self.limits.key)
            self._local = None
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None
        settled = None
        if self._reserved is not None:
            if self._reserved_token is not None:
                _RESERVED.reset(self._reserved_token)
                self._reserved_token = None
            if self._reserved.start is not None and self._reserved.settled is not None:
                settled = (self._reserved.start, self._reserved.settled)
            self._reserved = None
        x = self._x
        try:
            released = x.store.write_soon(_release, self.limits.key, x.run_id, self._step_key, x, settled)
        except StoreError:
            return  # the store is closing: the slot frees with the run's hold
        released.add_done_callback(lambda done: _released(x, done))


async def _release(
    tx: Tx, key: str, run_id: str, step_key: str, x: Running, settled: tuple[int, int] | None = None
) -> flow.Woken:
    """Free the slot; the steps it is handed to here start as the COMMIT goes out, where the store tells
    when that is (the step that freed it has ended: the key holds no more steps than slots; should the
    commit fail, the runs of the steps so started are stopped before anything else is decided)."""
    woken = await flow.release(tx, key, run_id, step_key, x.clock.now, x.fence.owner, settled, x.fence.epoch)
    return _hand_on_commit(tx, x, woken)


async def _release_many(tx: Tx, calls: Sequence[Args]) -> list[flow.Woken]:
    """The releases of one group commit, where the last of them stands: each key's slots freed together and
    its room handed once, one read of the key for all (steps that began together end together, and each
    release read the key again, one round trip each, while the slots they freed stood idle). What was
    handed rides on the first release of each key; the others answer that they handed nothing."""
    keys: dict[tuple[str, str], list[int]] = {}
    for i, (args, _) in enumerate(calls):
        keys.setdefault((args[0], args[3].fence.owner), []).append(i)
    woken = [flow.Woken()] * len(calls)
    for (key, holder), at in keys.items():
        freed = [_freed(*calls[i]) for i in at]
        x: Running = calls[at[0]][0][3]
        released = await flow.release_many(tx, key, freed, x.clock.now, holder)
        woken[at[0]] = _hand_on_commit(tx, x, released)
    return woken


def _freed(args: tuple[Any, ...], kwargs: dict[str, Any]) -> flow.Freed:
    _, run_id, step_key, x, *rest = args
    settled = rest[0] if rest else kwargs.get("settled")
    return flow.Freed(run_id, step_key, settled, x.fence.epoch)


def _hand_on_commit(tx: Tx, x: Running, woken: flow.Woken) -> flow.Woken:
    """The steps handed a slot here start as the COMMIT goes out, where the store tells when that is (else
    once it answers: ``_released``)."""
    if not woken.handed:
        return woken
    handed = woken.handed
    taken: list[str] = []  # the runs whose steps took a slot as the COMMIT went out

    def undone() -> None:
        undeliver(x.store, handed)
        x.host.early.stop(taken)

    if tx.when_committing(lambda: taken.extend(deliver(x.store, handed)), undone):
        return dataclasses.replace(woken, handed=())
    return woken


def _released(x: Running, done: asyncio.Future[flow.Woken]) -> None:
    """The release committed: the steps it handed slots to here start, and woken parked runs are claimed."""
    if done.cancelled() or done.exception() is not None:
        return
    woken = done.result()
    deliver(x.store, woken.handed)
    if woken.woke:
        x.host.wake(x.clock.now())


async def _block_until(x: Running, block: Any, wait: Wait, at: float) -> None:
    """``block`` (the run parks once every branch of its body waits), but look again at ``at`` if the
    run is still held then: another branch keeps it busy (a step waiting in place behind this one in
    the key's line would otherwise wait for it for good, and it for the park)."""
    me = asyncio.current_task()
    assert me is not None
    due = False

    def fired(timer: asyncio.Future[None]) -> None:
        nonlocal due
        if not timer.cancelled() and timer.exception() is None:
            due = True
            me.cancel()

    timer = asyncio.ensure_future(x.clock.sleep_until(at))
    timer.add_done_callback(fired)
    try:
        await block(wait)
    except asyncio.CancelledError:
        if due and me.uncancel() == 0:  # only the timer's cancel: the run was not parked meanwhile
            return
        raise
    finally:
        timer.remove_done_callback(fired)
        timer.cancel()


class Exempt:
    """A step of a flow-controlled run given ``flow_control=None``: no key, and ``ctx.flow_control`` is ``None``."""

    waited: float | None = None

    def __init__(self) -> None:
        self._token: contextvars.Token[Any] | None = None

    async def hold_here(self) -> None:
        pass

    async def enter(self, block: Any, attempt: int, first: float) -> tuple[int, float]:
        self._token = _CURRENT.set(None)
        return attempt, first

    def back_pressure(self, error: BaseException) -> None:
        pass

    def settle_result(self, result: Any) -> None:
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
        await step.hold_here()
        result = await call(fn, args, kwargs, pool)
        step.settle_result(result)
        return result
    except Exception as exc:
        step.back_pressure(exc)
        raise
    finally:
        step.leave()


async def park(store: Store, fence: Fence, now: float, **park: Any) -> float | None:
    """Park the run (``park_run``); the steps waiting here given a slot meanwhile start as it commits."""
    handed: list[flow.Handed] = []
    woke = await store.write(park_run, fence, now, handed=handed, **park)
    deliver(store, handed)
    return woke


async def park_run(
    tx: Tx, /, fence: Fence, now: float, *, flow_keys: list[str], handed: list[flow.Handed], **park: Any
) -> float | None:
    """``runs.park_run`` for a run some of whose steps wait on flow keys: if their turn came meanwhile,
    the run is woken in the same transaction (no release can slip between the two). A slot handed to
    one of its steps meanwhile goes back to the line; what that hands to others is added to ``handed``."""
    handed.clear()  # a batch run again runs this again
    woke = await runs.park_run(tx, fence, now, **park)
    due, woken = await flow.wake_waiters(tx, flow_keys, now, fence.run_id)
    handed += woken.handed
    if due is None:
        return woke
    return due if woke is None else min(woke, due)


async def rate_limit(x: Running, name: str, limit: int, period: Any, key: Any, cost: Any = None) -> None:
    """``ctx.rate_limit``: take a slot of the sliding window ``name`` (per ``key``), journaled; with ``cost``,
    reserve that many units of it (a window whose calls all give one counts units, not calls)."""
    try:
        rate, seconds, _ = check_limits(limit, period, None)
        units = None if cost is None else check_cost(cost)
    except ValueError as exc:
        raise InvalidArgument(f"ctx.rate_limit({name!r}): {str(exc).replace('rate', 'limit', 1)}") from None
    assert rate is not None
    window_key = f"$rate:{name}" if key is None else f"$rate:{name}:{key}"
    if units is not None and units > rate:
        raise CostExceedsRate(window_key, units, rate, seconds)
    step_key = x.key(f"$rate:{name}")
    entry = x.entry(step_key)
    if entry is not None and entry["status"] == "completed":
        return  # replayed: the slot was taken once
    first: float | None = None
    while True:
        now = x.clock.now()
        first = now if first is None else first

        async def take(tx: Tx) -> None:
            retry = await flow_rate.take_rate_slot(tx, window_key, rate, seconds, x.clock.now, units)
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
with_many(_release, _release_many, gather=True)
with_locks(park_run, lambda args, kwargs: flow.lock_names(list(kwargs.get("flow_keys") or ())))
