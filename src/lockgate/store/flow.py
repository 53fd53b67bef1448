"""Store operations for step flow control: each key's limits, its slots and waiters, its rate window.

A step under a key asks ``acquire``: granted, it holds a slot (a ``running`` row taken under
its run's epoch) until ``release``; refused, it keeps a place in the key's line (a
``waiting`` row; priority, then arrival) and its run parks. Whatever frees room (a release,
a raised limit, a park that found room meanwhile) wakes the first waiters that fit, by
moving their runs' ``wake_at``: the dispatcher of any process claims them as any woken run.
A running row counts only while its run is held under the epoch that took it, so the slots
of a process that died free themselves with its lease. Decisions on one key are serialised
(``gate.lock_key``); runs without flow control never reach this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..buckets import Bucket, bucket_hit, bucket_opens, bucket_room
from .base import Row, Tx
from .coalesce import with_locks
from .gate import bucket_state, lock_key, lock_name, set_bucket
from .shared import Fence

__all__ = [
    "Grant",
    "KeyState",
    "acquire",
    "get_key",
    "key_states",
    "lock_names",
    "parked_runs",
    "release",
    "set_key",
    "take_rate_slot",
    "wake_waiters",
]

_LOCK_SCOPE = "flow"


@dataclass(frozen=True)
class Grant:
    """What ``acquire`` decided: ``granted``, else when to look again (``retry_at``; ``None``: when woken)."""

    granted: bool
    limits: Row
    waited: float = 0.0
    retry_at: float | None = None
    attempt: int = 1  # the attempt the step waited to begin, as its waiting row kept it across a park
    first: float | None = None  # when its first attempt began (kept with it)
    on_burst: bool = False  # granted on burst (a burst key: ``lockgate.buckets.bucket_hit``)


@dataclass(frozen=True)
class KeyState:
    """A key as ``flow-keys`` shows it: its limits and what it holds now."""

    key: str
    rate: int | None
    period: float
    parallelism: int | None
    declared: bool
    running: int
    waiting: int
    started: int
    oldest_waiting: float | None
    paused_until: float | None
    paused: bool
    pause_reason: str | None
    burst: int | None = None  # the rate is a token bucket (``lockgate.buckets``)


def _limits(declared: dict[str, Any]) -> dict[str, Any]:
    return {k: declared[k] for k in ("key", "rate", "period", "parallelism")}


async def get_key(tx: Tx, key: str) -> Row | None:
    """The key's limits row (``key, rate, period, parallelism, declared, updated_at, burst``), if any."""
    return await tx.one("stepflow_get_key", {"key": key})


async def set_key(
    tx: Tx, key: str, rate: int | None, period: float, parallelism: int | None, now: float, burst: int | None = None
) -> list[str]:
    """Set a key's limits by hand (declarations no longer change them); waiters that now fit are woken."""
    await lock_key(tx, _LOCK_SCOPE, key)
    await tx.execute(
        "stepflow_set_key", {"key": key, "rate": rate, "period": period, "parallelism": parallelism, "now": now}
    )
    await tx.execute("stepflow_set_burst", {"key": key, "burst": burst, "declared": None})
    await tx.execute("stepflow_drop_dead_waiters", {"key": key})
    state = await _state(tx, key, now)
    assert state is not None
    return await _wake(tx, state, now)


async def _locked(tx: Tx, key: str, clock: Callable[[], float]) -> float:
    """Lock ``key`` and read the time once the lock is held (a pipelined lock is taken when the server
    reaches it: the round trip makes sure it has, so no decision is stamped before the one it follows)."""
    await lock_key(tx, _LOCK_SCOPE, key)
    if not tx.single_writer:
        await tx.scalar("stepflow_locked")
    return clock()


async def _state(tx: Tx, key: str, now: float, run_id: str = "", step_key: str = "") -> Row | None:
    """The key's limits and what it holds now, with the step's own place (one statement)."""
    return await tx.one("stepflow_state", {"key": key, "now": now, "run_id": run_id, "step_key": step_key})


async def _room(tx: Tx, state: Row, now: float) -> tuple[float, float | None]:
    """How many more steps may start under the key now, and (when none) the earliest time one may."""
    if int(state["paused"]):
        until = float(state["paused_until"])
        return 0, None if until >= 1e300 else until
    room = math.inf
    if state["parallelism"] is not None:
        room = int(state["parallelism"]) - int(state["running"])
    at: float | None = None
    if state["rate"] is not None and room > 0 and state["burst"] is not None:
        return await _bucket_room(tx, state, now, room)
    if state["rate"] is not None and room > 0:
        rate, used, period = int(state["rate"]), int(state["started"]), float(state["period"])
        left = rate - used
        if left <= 0:  # the window opens when enough of its starts leave it (one, unless the rate was lowered)
            nth: Any = state["oldest"]
            if used > rate:
                since = now - period
                nth = await tx.scalar(
                    "stepflow_nth_start", {"key": state["key"], "since": since, "offset": used - rate}
                )
            at = None if nth is None else float(nth) + period
        room = min(room, left)
    return max(room, 0), at


async def acquire(
    tx: Tx,
    declared: dict[str, Any] | None,
    key: str,
    fence: Fence,
    step_key: str,
    priority: int,
    clock: Callable[[], float],
    attempt: int = 1,
    first: float | None = None,
) -> Grant:
    """Take a slot of ``key`` for the step ``step_key`` of the held run, or keep its place in line.

    ``declared``: the limits the step was given (``key, rate, period, parallelism``), written as
    the key's when it has none yet (or had a different declaration); ``None`` when this process
    wrote them already. The time is read once the key is locked, so that a grant's instant is when
    it is decided, not when it was asked for (the rate window counts those instants). ``attempt``
    and ``first``: the attempt about to begin and when the step's first began, kept on a waiting
    row; a grant to a step that waited returns what its row kept (the step entered again after a
    park counts on from there).
    """
    now = await _locked(tx, key, clock)
    if declared is not None:
        params = {**_limits(declared), "declared": declared["declared"], "now": now}
        await tx.execute("stepflow_declare_key", params)
        burst = {"key": key, "burst": declared.get("burst"), "declared": declared["declared"]}
        await tx.execute("stepflow_set_burst", burst)
    run_id = fence.run_id
    state = await _state(tx, key, now, run_id, step_key)
    if state is None:  # declared by this process, then the table was emptied: declare again
        raise LookupError(key)
    limits = {k: state[k] for k in ("key", "rate", "period", "parallelism", "declared", "burst")}
    waiting = state["my_state"] == "waiting"
    room, at = await _room(tx, state, now)
    place = {"key": key, "run_id": run_id, "step_key": step_key}
    line = {**place, "id": None, "priority": priority, "room": 1}
    if waiting:
        line.update(id=state["my_id"], priority=state["my_priority"])
    if room > 0:
        ahead = int(await tx.scalar("stepflow_ahead", {**line, "room": int(min(room, 1_000_000))}))
        if ahead < room:
            await tx.execute("stepflow_take_slot", {**place, "priority": priority, "epoch": fence.epoch, "now": now})
            if limits["rate"] is not None:
                await tx.execute("stepflow_prune_starts", {"key": key, "before": now - float(limits["period"])})
                await tx.execute("stepflow_add_start", {"key": key, "at": now})
            opens, on_burst = (None, False) if limits["burst"] is None else await _take_bucket(tx, limits, now)
            waited = now - float(state["my_since"]) if waiting else 0.0
            if room > 1:  # room left beside this step: the first in line take it (none wait, mostly)
                await _wake(tx, limits, now, room=room - 1, at=None)
            elif limits["burst"] is not None:
                if opens is not None:
                    await _wake(tx, limits, now, room=0, at=opens)  # the next in line looks when the bucket lets it
            elif limits["rate"] is not None and int(state["started"]) + 1 >= int(limits["rate"]):
                opens = (float(state["oldest"]) if state["oldest"] is not None else now) + float(limits["period"])
                await _wake(tx, limits, now, room=0, at=opens)  # the next in line looks when the window opens
            if waiting and state["my_attempt"] is not None:  # the count its waiting row kept
                attempt, first = int(state["my_attempt"]), state["my_first"]
                return Grant(True, limits, waited=waited, attempt=attempt, first=first, on_burst=on_burst)
            return Grant(True, limits, waited=waited, on_burst=on_burst)
    if at is not None and int(await tx.scalar("stepflow_ahead", line)) > 0:
        at = None  # only the first in line looks again when the window opens; the next follow its start
    if not waiting:
        if state["my_state"] is not None:
            await tx.execute("stepflow_free_slot", place)
        await tx.execute(
            "stepflow_add_waiter", {**place, "priority": priority, "now": now, "attempt": attempt, "first": first}
        )
    return Grant(False, limits, retry_at=at)


async def release(tx: Tx, key: str, run_id: str, step_key: str, now: float) -> list[str]:
    """The step's attempt ended: free its slot and wake the waiters that now fit (their run ids)."""
    await lock_key(tx, _LOCK_SCOPE, key)
    await tx.execute("stepflow_free_slot", {"key": key, "run_id": run_id, "step_key": step_key})
    state = await _state(tx, key, now)
    return [] if state is None else await _wake(tx, state, now)


async def wake_waiters(tx: Tx, keys: list[str], now: float) -> float | None:
    """After a run parked waiting on ``keys``: wake whoever fits now (it, if its turn came meanwhile).

    The earliest wake time set, if any.
    """
    earliest: float | None = None
    for key in sorted(keys):
        await lock_key(tx, _LOCK_SCOPE, key)
        state = await _state(tx, key, now)
        if state is None:
            continue
        room, at = await _room(tx, state, now)
        if room > 0 and await _wake(tx, state, now, room=room, at=at):
            earliest = now
        elif at is not None and await _wake(tx, state, now, room=0, at=at):
            earliest = at if earliest is None else min(earliest, at)
    return earliest


async def _wake(tx: Tx, state: Row, now: float, *, room: float | None = None, at: float | None = None) -> list[str]:
    """Wake the first waiters that fit (``room`` of them now), or the first one when the window opens."""
    if room is None:
        room, at = await _room(tx, state, now)
    key = state["key"]
    if room > 0:
        n = int(min(room, 1_000_000))
        rows = await tx.execute("stepflow_wake_waiters", {"key": key, "n": n, "at": now, "now": now})
    elif at is not None:  # full for now: the first in line looks again when the window (or pause) lets it
        rows = await tx.execute("stepflow_wake_waiters", {"key": key, "n": 1, "at": at, "now": now})
    else:
        return []
    return [r["id"] for r in rows]


async def _bucket_room(tx: Tx, state: Row, now: float, room: float) -> tuple[float, float | None]:
    """``_room`` for a key with a burst: its rate is a token bucket (``lockgate.buckets``)."""
    bucket, rate, period, burst = await _bucket(tx, state)
    fits = bucket_room(bucket, rate, period, burst, now)
    at = bucket_opens(bucket, rate, period, burst, now) if fits <= 0 else None
    return max(min(room, fits), 0), at


async def _take_bucket(tx: Tx, limits: Row, now: float) -> tuple[float | None, bool]:
    """A step of a key with a burst starts: its bucket moved on; when the next may start (``None``:
    now), and whether this one started on burst."""
    bucket, rate, period, burst = await _bucket(tx, limits)
    taken, on_burst = bucket_hit(bucket, rate, period, now)
    await set_bucket(tx, _LOCK_SCOPE, limits["key"], taken.anchor, taken.n, taken.last)
    return bucket_opens(taken, rate, period, burst, now), on_burst


async def _bucket(tx: Tx, limits: Row) -> tuple[Bucket | None, int, float, int]:
    """A burst key's bucket as stored, and its rate, period and burst."""
    found = await bucket_state(tx, _LOCK_SCOPE, limits["key"])
    bucket = None if found is None else Bucket(*found)
    return bucket, int(limits["rate"]), float(limits["period"]), int(limits["burst"])


async def take_rate_slot(tx: Tx, key: str, limit: int, period: float, clock: Callable[[], float]) -> float | None:
    """``ctx.rate_limit``: take a slot of the sliding window ``key``; ``None``, else when one opens.

    The time is read once the key is locked: the instant a slot is taken is when it is decided."""
    now = await _locked(tx, key, clock)
    since = now - period
    started = await tx.one("stepflow_started", {"key": key, "since": since})
    used = int(started["n"]) if started else 0
    if used < limit:
        await tx.execute("stepflow_prune_starts", {"key": key, "before": since})
        await tx.execute("stepflow_add_start", {"key": key, "at": now})
        return None
    nth = await tx.scalar("stepflow_nth_start", {"key": key, "since": since, "offset": used - limit})
    return now + period if nth is None else float(nth) + period


async def parked_runs(tx: Tx, workflow: str | None = None) -> list[Row]:
    """Runs parked waiting for a step flow-control key, per workflow (``workflow, n``)."""
    return await tx.execute("stepflow_parked_runs", {"workflow": workflow})


async def key_states(tx: Tx, now: float, key: str | None = None) -> list[KeyState]:
    """Every key's limits and state (or the one ``key``'s; empty if it has no row)."""
    if key is not None:
        row = await get_key(tx, key)
        rows = [] if row is None else [row]
    else:
        rows = await tx.execute("stepflow_list_keys")
    out: list[KeyState] = []
    for row in rows:
        k = row["key"]
        stats = await tx.one("stepflow_key_stats", {"key": k})
        pause = await tx.one("stepflow_key_pause", {"key": k, "now": now})
        started = await tx.one("stepflow_started", {"key": k, "since": now - float(row["period"])})
        oldest = None if stats is None else stats["oldest_waiting"]
        out.append(
            KeyState(
                key=k,
                rate=row["rate"],
                period=float(row["period"]),
                parallelism=row["parallelism"],
                declared=row["declared"] is not None,
                running=int(await tx.scalar("stepflow_running", {"key": k, "now": now})),
                waiting=0 if stats is None else int(stats["waiting"]),
                started=0 if started is None else int(started["n"]),
                oldest_waiting=None if oldest is None else float(oldest),
                paused=pause is not None,
                paused_until=None if pause is None or pause["until"] is None else float(pause["until"]),
                pause_reason=None if pause is None else pause["reason"],
                burst=None if row["burst"] is None else int(row["burst"]),
            )
        )
    return out


def lock_names(keys: list[str]) -> list[str]:
    """The ``lock_key`` names of flow ``keys`` (declared to a group commit: ``coalesce.with_locks``)."""
    return [lock_name(_LOCK_SCOPE, key) for key in keys]


with_locks(acquire, lambda args, kwargs: lock_names([args[1]]))
with_locks(release, lambda args, kwargs: lock_names([args[0]]))
