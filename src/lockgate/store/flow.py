"""Store operations for step flow control: each key's limits, its slots and waiters, its rate window.

A step under a key asks ``acquire``: granted, it holds a slot (a ``running`` row taken under
its run's epoch) until ``release``; refused, it keeps a place in the key's line (a
``waiting`` row; priority, then arrival). A step near the head of the line (fewer than the
key's parallelism ahead of it: ``Grant.near``) waits in its process; the others park their
runs. Whatever frees room (a release, a raised limit, a park that found room meanwhile)
hands it to the first waiters that fit in the same transaction: a waiter whose run a worker
holds is given the slot there and then (its row turns ``running`` under that hold's epoch,
``Handed``), a parked one is woken by moving its run's ``wake_at``, and so are the parked
runs among the next in line, so that they wait near the head before their turn comes.
A running row counts only while its run is held under the epoch that took it, so the slots
of a process that died free themselves with its lease. A key with a burst starts under a token
bucket (``lockgate.buckets``) instead of its sliding window; only ``acquire`` moves it on, so
such a key's waiters are told to ask rather than handed a slot. A weighted key (``FlowControl(cost=)``)
counts units in its window (``store/flow_window.py``): no slot is handed in place, the first of its line
is told to ask when it may fit, and ``acquire`` decides with the asking step's own cost, strictly in the
order of the line. Decisions on one key are serialised (``gate.lock_key``); runs without flow control
never reach this module.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..buckets import Bucket, bucket_hit, bucket_opens, bucket_room
from . import flow_window as window
from .base import Row, Tx
from .coalesce import with_locks
from .flow_window import KeyState, key_states
from .gate import bucket_state, lock_key, lock_name, set_bucket
from .shared import Fence, Fenced

__all__ = [
    "FLOW_SCOPE",
    "Freed",
    "Grant",
    "Handed",
    "KeyState",
    "Woken",
    "acquire",
    "get_key",
    "handed_slots",
    "key_states",
    "lock_names",
    "parked_runs",
    "release",
    "release_many",
    "set_key",
    "wake_waiters",
]

FLOW_SCOPE = "flow"  # the scope of a step flow key's lock (``lock_key``)
# a key's limits, as a grant carries them
_LIMITS = ("key", "rate", "period", "parallelism", "declared", "burst", "weighted")


@dataclass(frozen=True)
class Grant:
    """What ``acquire`` decided: ``granted``, else when to look again (``retry_at``; ``None``: when woken)."""

    granted: bool
    limits: Row
    waited: float = 0.0
    retry_at: float | None = None
    attempt: int = 1  # the attempt the step waited to begin, as its waiting row kept it across a park
    first: float | None = None  # when its first attempt began (kept with it)
    near: bool = False  # refused near the head of the line: wait in the process for the slot to be handed over
    moving: bool = False  # refused, in a line whose slots are handed on as steps end (no pause, full window, burst)
    handed: tuple[Handed, ...] = ()  # slots this transaction handed to other waiters (see ``Handed``)
    woke: bool = False  # it woke parked runs (runnable now)
    on_burst: bool = False  # granted on burst (a burst key: ``lockgate.buckets.bucket_hit``)
    start: int | None = None  # a weighted key: the start that holds the call's reservation (to settle it)
    over: bool = False  # a weighted key: the call's cost is over the key's rate, so it could never start


@dataclass(frozen=True)
class Handed:
    """A slot handed to a waiting step whose run ``owner`` holds, in the transaction that made room.

    The step's row is ``running`` under the hold's epoch once the transaction commits: its
    worker starts it without asking again (``grant`` is what ``acquire`` would have answered).
    Under a rate window only a step of the releasing worker is granted so (it starts as the
    transaction commits, the instant its start is counted at); another is told to ask (``grant``
    ``None``), and a grant it then takes is counted when it asks. A key with a burst hands no slot
    so: its token bucket moves on in ``acquire`` only, so all its waiters are told to ask.
    """

    key: str
    run_id: str
    step_key: str
    owner: str
    grant: Grant | None  # ``None``: not granted, but its turn may have come: ask again


@dataclass(frozen=True)
class Woken:
    """What making room did: slots handed to held waiters, and whether parked runs were woken (runnable now)."""

    handed: tuple[Handed, ...] = ()
    woke: bool = False


def _limits(declared: dict[str, Any]) -> dict[str, Any]:
    return {k: declared[k] for k in ("key", "rate", "period", "parallelism")}


async def get_key(tx: Tx, key: str) -> Row | None:
    """The key's limits row (``key, rate, period, parallelism, declared, updated_at, burst``), if any."""
    return await tx.one("stepflow_get_key", {"key": key})


async def set_key(
    tx: Tx, key: str, rate: int | None, period: float, parallelism: int | None, now: float, burst: int | None = None
) -> tuple[Handed, ...]:
    """Set a key's limits by hand (declarations no longer change them); waiters that now fit are woken."""
    await lock_key(tx, FLOW_SCOPE, key)
    await tx.execute(
        "stepflow_set_key", {"key": key, "rate": rate, "period": period, "parallelism": parallelism, "now": now}
    )
    await tx.execute("stepflow_set_burst", {"key": key, "burst": burst, "declared": None})
    await tx.execute("stepflow_drop_dead_waiters", {"key": key})
    state, line = await _read(tx, key, now)
    assert state is not None
    return (await _wake(tx, state, now, line=line)).handed


_CAP: dict[str, int] = {}  # per key: how far into its line one read looks (twice its parallelism, and one)
_WEIGHTED: set[str] = set()  # keys last read weighted here: their line is read by its units' head instead


async def _read(
    tx: Tx, key: str, now: float, run_id: str = "", step_key: str = "", fence: Fence | None = None
) -> tuple[Row | None, _Line]:
    """The key's state (``stepflow_state``) and the head of its line, read in one round trip; with the asking hold's
    ``fence``, ``Fenced`` when that hold lost its lease (a slot it took, or a place it wrote, would stand
    for the run's next hold)."""
    cap = _CAP.get(key, 16)
    # Only a step's own ask counts the waiters ahead of it (a release or a park reads no one's place).
    params = {"key": key, "now": now, "run_id": run_id, "step_key": step_key, "cap": cap if run_id else 0}
    fenced = [] if fence is None else [("stepflow_fence", fence.params())]
    reads = [*fenced, ("stepflow_state", params)]
    heads, held = {"key": key, "n": cap}, {"key": key, "n": cap, "now": now}
    line_reads = [("stepflow_heads", heads), ("stepflow_held_heads", held)]
    # In-process a statement costs no round trip: the line is read when it is needed. A weighted key's line
    # is never read from here (``_wake_units`` reads its head): while the key stays weighted, it is not read.
    with_line = not tx.single_writer and key not in _WEIGHTED
    answers = await tx.execute_all([*reads, *line_reads] if with_line else reads)
    if fenced and not answers[0]:
        raise Fenced()
    states = answers[len(fenced)]
    state = states[0] if states else None
    if state is not None and _weighted(state):
        _WEIGHTED.add(key) if len(_WEIGHTED) < 10_000 else _WEIGHTED.clear()
    elif not with_line and not tx.single_writer:  # weighted when last read, declared unweighted since: its line
        _WEIGHTED.discard(key)
        answers = [*answers, *await tx.execute_all(line_reads)]
    line = _Line(answers[-2], cap, answers[-1]) if len(answers) > len(reads) else _Line([], 0, [])
    if state is not None and state["parallelism"] is not None:
        if len(_CAP) > 10_000:
            _CAP.clear()
        _CAP[key] = max(16, 2 * int(state["parallelism"]) + 1)
    return state, line


@dataclass(frozen=True)
class _Line:
    """The first ``cap`` of a key's line as read beside its state (``stepflow_heads``), and the first ``cap`` of
    those waiting in place in their workers (``stepflow_held_heads``); ``cap`` 0: not read."""

    heads: list[Row]
    cap: int
    held: list[Row]

    def without(self, run_id: str, step_key: str) -> _Line:
        """The line without the step (which just took its slot)."""
        heads = [h for h in self.heads if h["run_id"] != run_id or h["step_key"] != step_key]
        held = [h for h in self.held if h["run_id"] != run_id or h["step_key"] != step_key]
        return _Line(heads, self.cap - (len(self.heads) - len(heads)), held)

    def first(self, n: int) -> list[Row] | None:
        """The first ``n``, or ``None`` when the read did not reach that far and the line may go on."""
        return _first(self.heads, self.cap, n)

    def first_held(self, n: int) -> list[Row] | None:
        """The first ``n`` waiting in place (``first``'s answer, of those)."""
        return _first(self.held, self.cap, n)


def _first(rows: list[Row], cap: int, n: int) -> list[Row] | None:
    if n > len(rows) and len(rows) >= cap:
        return None
    return rows[:n]


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
    units: int | None = None,
    may_wait: bool = True,
    inline: float = 0.0,
) -> Grant:
    """Take a slot of ``key`` for the step ``step_key`` of the held run, or keep its place in line.

    ``declared``: the limits the step was given (``key, rate, period, parallelism``), written as
    the key's when it has none yet (or had a different declaration); ``None`` when this process
    wrote them already. The time is read once the key is locked, so that a grant's instant is when
    it is decided, not when it was asked for (the rate window counts those instants). ``attempt``
    and ``first``: the attempt about to begin and when the step's first began, kept on a waiting
    row; a grant to a step that waited returns what its row kept (the step entered again after a
    park counts on from there). A slot handed to the step while it waited is granted as it is.
    ``units``: the call's cost under a weighted key (``None``: the step counts as one call). ``may_wait``:
    whether its worker has room for it to wait in place further back than the head of the line; ``inline``:
    how soon a window must open for the step to wait in place for it (the worker's ``inline_sleep``).
    """
    await lock_key(tx, FLOW_SCOPE, key)
    if declared is not None:
        params = {**_limits(declared), "declared": declared["declared"], "now": clock()}
        await tx.execute("stepflow_declare_key", params)
        burst = {"key": key, "burst": declared.get("burst"), "declared": declared["declared"]}
        await tx.execute("stepflow_set_burst", burst)
        await window.set_weighted(tx, key, bool(declared.get("weighted")))
    run_id = fence.run_id
    # Read with the time as asked, which counts the window no shorter than now; the lock is held once the
    # read answers, and the time read then stamps the decision (see ``flow_rate.locked``).
    state, line = await _read(tx, key, clock(), run_id, step_key, fence)
    now = clock()
    if state is None:  # declared by this process, then the table was emptied: declare again
        raise LookupError(key)
    limits = {k: state[k] for k in _LIMITS}
    mine = state["my_state"]
    if mine == "running":
        if state["my_epoch"] is not None and int(state["my_epoch"]) == fence.epoch:
            return _handed_grant(limits, state["my_started"], state["my_since"], state["my_attempt"], state["my_first"])
        # handed to (or taken by) an earlier hold of the run, which ended before the step ran: back at its place.
        # Its start stays counted: that hold may have begun the step before it ended, which no one here can know.
        await tx.execute("stepflow_requeue", {"id": state["my_id"]})
        mine = "waiting"
    if units is not None and limits["rate"] is not None:
        return await _acquire_units(tx, state, limits, mine, fence, step_key, priority, now, attempt, first, units)
    waiting = mine == "waiting"
    room, at = await _room(tx, state, now)
    near = _near(state)
    place = {"key": key, "run_id": run_id, "step_key": step_key}
    place_in_line = {**place, "id": None, "priority": priority, "room": 1, "now": now}
    if waiting:
        place_in_line.update(id=state["my_id"], priority=state["my_priority"])
    ahead: int | None = None
    if room > 0 or near:
        need = int(min(max(room, near), 1_000_000))
        ahead = int(state["ahead"])
        if mine != state["my_state"] or (ahead >= line.cap and need > line.cap):  # requeued, or counted short
            ahead = int(await tx.scalar("stepflow_held_ahead", {**place_in_line, "room": need}))
    if room > 0 and ahead is not None and ahead < room:
        await tx.execute("stepflow_take_slot", {**place, "priority": priority, "epoch": fence.epoch, "now": now})
        if limits["rate"] is not None:
            await tx.execute("stepflow_prune_starts", {"key": key, "before": now - float(limits["period"])})
            await tx.execute("stepflow_add_start", {"key": key, "at": now})
        opens, on_burst = (None, False) if limits["burst"] is None else await _take_bucket(tx, limits, now)
        if limits["burst"] is None and limits["rate"] is not None and int(state["started"]) + 1 >= int(limits["rate"]):
            opens = (float(state["oldest"]) if state["oldest"] is not None else now) + float(limits["period"])
        waited = now - float(state["my_since"]) if waiting else 0.0
        handed = Woken()
        others = line.without(run_id, step_key)
        if opens is not None:
            near = 0  # this start fills the window (or empties the bucket)
        if room > 1 or (waiting and near):  # room beside this step, or the line moved up: who comes next
            handed = await _wake(
                tx, limits, now, room=room - 1, at=None, near=near, holder=fence.owner, line=others
            )
        if room <= 1 and opens is not None:  # the next in line looks when the window (or the bucket) lets it
            later = await _wake(tx, limits, now, room=0, at=opens, holder=fence.owner, line=others)
            handed = Woken(handed.handed + later.handed, handed.woke or later.woke)
        if waiting and state["my_attempt"] is not None:  # the count its waiting row kept
            attempt, first = int(state["my_attempt"]), state["my_first"]
            return Grant(
                True, limits, waited, None, attempt, first, handed=handed.handed, woke=handed.woke, on_burst=on_burst
            )
        return Grant(True, limits, waited=waited, handed=handed.handed, woke=handed.woke, on_burst=on_burst)
    if at is not None:
        if ahead is None:
            ahead = int(await tx.scalar("stepflow_held_ahead", place_in_line))
        if ahead > 0:
            at = None  # only the first in line looks again when the window opens; the next follow its start
    moving = near > 0 and limits["burst"] is None  # a burst key's waiters are told to ask: they park
    close = ahead is not None and ahead < near
    # Whether the step waits in place in its worker (as engine/stepflow.py decides): only such a step is handed a
    # slot or counted ahead of others, under the hold it asked with.
    stays = close or (moving and may_wait) if at is None else at - now <= inline
    held = fence.epoch if stays else None
    if not waiting:
        if mine is not None:
            await tx.execute("stepflow_free_slot", place)
        waiter = {**place, "priority": priority, "now": now, "attempt": attempt, "first": first, "epoch": held}
        await tx.execute("stepflow_add_waiter", waiter)
    elif state["my_held"] != held:
        await tx.execute("stepflow_hold_place", {"id": state["my_id"], "epoch": held})
    return Grant(False, limits, retry_at=at, near=close, moving=moving)


def _weighted(state: Row) -> bool:
    return bool(state.get("weighted")) and state["rate"] is not None


async def _acquire_units(
    tx: Tx,
    state: Row,
    limits: Row,
    mine: Any,
    fence: Fence,
    step_key: str,
    priority: int,
    now: float,
    attempt: int,
    first: float | None,
    units: int,
) -> Grant:
    """``acquire`` for a call of ``units`` under a weighted key: strictly in the order of the line, the first
    of it starts when its units fit the window (``flow_window.units_room``); nothing is handed in place."""
    key, run_id = state["key"], fence.run_id
    place = {"key": key, "run_id": run_id, "step_key": step_key}
    if units > int(limits["rate"]):  # set lower by hand since the call was checked: it could never start
        if mine is not None:
            await tx.execute("stepflow_free_slot", place)
        return Grant(False, limits, over=True)
    waiting = mine == "waiting"
    ahead = int(state["ahead"])
    if mine != state["my_state"]:  # requeued: counted again from its place
        mine_in_line = {**place, "id": state["my_id"], "priority": state["my_priority"], "room": 1}
        mine_in_line["now"] = now
        ahead = int(await tx.scalar("stepflow_ahead", mine_in_line))
    fits, at = await window.units_room(tx, state, now, units)
    if fits and ahead == 0:
        await tx.execute("stepflow_take_slot", {**place, "priority": priority, "epoch": fence.epoch, "now": now})
        await tx.execute("stepflow_prune_starts", {"key": key, "before": now - float(limits["period"])})
        start = await window.add_units(tx, key, now, units)
        woken, _ = await _wake_units(tx, state, now, holder=fence.owner, running=1)
        waited = now - float(state["my_since"]) if waiting else 0.0
        if waiting and state["my_attempt"] is not None:  # the count its waiting row kept
            attempt, first = int(state["my_attempt"]), state["my_first"]
        return Grant(True, limits, waited, None, attempt, first, handed=woken.handed, woke=woken.woke, start=start)
    if not waiting:
        if mine is not None:
            await tx.execute("stepflow_free_slot", place)
        await window.add_waiter(tx, place, priority, now, attempt, first, units)
    if ahead > 0:
        return Grant(False, limits)  # told when it is first in line and may fit
    return Grant(False, limits, retry_at=at, near=at is None and not int(state["paused"]))


async def _wake_units(
    tx: Tx, state: Row, now: float, *, holder: str = "", running: int = 0
) -> tuple[Woken, float | None]:
    """Tell the first of a weighted key's line to ask when its units may fit: now, or when the window
    opens for them (``None``: when a slot frees). What was handed, and when a parked first was woken for."""
    head = await window.unit_head(tx, state["key"])
    if head is None:
        return Woken(), None
    fits, at = await window.units_room(tx, state, now, int(head["units"] or 1), running)
    at = now if fits else at
    if at is None:
        return Woken(), None
    if head["owner"] is not None and _held(head, now):  # waiting in its process: it asks now, or is told when
        later = None if at <= now else Grant(False, {k: state[k] for k in _LIMITS}, retry_at=at)
        told = Handed(state["key"], head["run_id"], head["step_key"], head["owner"], later)
        if head["owner"] != holder:
            await tx.execute("stepflow_notify", {"channel": "flow-ask", "owner": head["owner"]})
        return Woken((told,)), None
    await tx.execute("stepflow_wake_waiters", {"key": state["key"], "n": 1, "at": at, "now": now})
    return Woken(woke=True), at


def _near(state: Row) -> int:
    """How many of a key's line wait in their processes rather than parked: as many as may run at once
    (a slot freed goes to one of them at once; the next parked ones are woken to take their places)."""
    if state["parallelism"] is None or int(state.get("paused") or 0):
        return 0
    if state["rate"] is not None and int(state["started"]) >= int(state["rate"]):
        return 0  # the window is full: the next slot comes with its opening, not from a step that ends
    return int(state["parallelism"])


def _handed_grant(limits: Row, started: Any, since: Any, attempt: Any, first: Any) -> Grant:
    waited = max(0.0, float(started) - float(since)) if started is not None and since is not None else 0.0
    if attempt is None:
        return Grant(True, limits, waited=waited)
    return Grant(True, limits, waited=waited, attempt=int(attempt), first=first)


@dataclass(frozen=True)
class Freed:
    """A step's attempt that ended under a key: its slot to free. ``settled``: a weighted call's start and the
    units it really used, which count in its reservation's place. ``epoch``: the releasing hold's; only a slot
    taken under it is freed (``None``: the step's slot, whoever's)."""

    run_id: str
    step_key: str
    settled: tuple[int, int] | None = None
    epoch: int | None = None


async def release(
    tx: Tx,
    key: str,
    run_id: str,
    step_key: str,
    clock: Callable[[], float],
    holder: str = "",
    settled: tuple[int, int] | None = None,
    epoch: int | None = None,
) -> Woken:
    """The step's attempt ended: free its slot and hand the room to the waiters that now fit (``release_many``)."""
    return await release_many(tx, key, [Freed(run_id, step_key, settled, epoch)], clock, holder)


async def release_many(tx: Tx, key: str, freed: Sequence[Freed], clock: Callable[[], float], holder: str = "") -> Woken:
    """The attempts ``freed`` under ``key`` ended: free their slots, then hand the room to the waiters that now
    fit, reading the key once for all of them. ``holder``: the releasing worker, which learns of its own
    hand-offs from the answer (the others are notified). The time of a hand-off is read once a round trip
    after the key's lock has answered (see ``flow_rate.locked``)."""
    await lock_key(tx, FLOW_SCOPE, key)
    for one in freed:
        place = {"key": key, "run_id": one.run_id, "step_key": one.step_key}
        if one.epoch is None:
            await tx.execute("stepflow_free_slot", place)
        else:  # only the slot this hold took: a hold that lost its lease leaves the next one's alone
            await tx.execute("stepflow_release_slot", {**place, "epoch": one.epoch})
        if one.settled is not None:
            await window.settle(tx, key, *one.settled)
    state, line = await _read(tx, key, clock())
    if state is None:
        return Woken()
    return await _wake(tx, state, clock(), holder=holder, line=line)


async def wake_waiters(tx: Tx, keys: list[str], now: float, run_id: str | None = None) -> tuple[float | None, Woken]:
    """After a run parked waiting on ``keys``: wake whoever fits now (it, if its turn came meanwhile).

    A slot handed to ``run_id`` before it parked goes back to the line at its place first. The
    earliest wake time set, if any, and what was handed to held waiters.
    """
    earliest: float | None = None
    handed: list[Handed] = []
    woke = False
    for key in sorted(keys):
        await lock_key(tx, FLOW_SCOPE, key)
        if run_id is not None:
            await tx.execute("stepflow_unhand_starts", {"key": key, "run_id": run_id})
            await tx.execute("stepflow_unhand", {"key": key, "run_id": run_id})
            await tx.execute("stepflow_unhold", {"key": key, "run_id": run_id})
        state, line = await _read(tx, key, now)
        if state is None:
            continue
        if _weighted(state):
            woken, at = await _wake_units(tx, state, now)
            if woken.woke and at is not None:
                earliest = at if earliest is None else min(earliest, at)
            handed += woken.handed
            woke = woke or woken.woke
            continue
        room, at = await _room(tx, state, now)
        if room > 0:
            woken = await _wake(tx, state, now, room=room, at=at, near=_near(state), line=line)
            if woken.woke:
                earliest = now
        elif at is not None:
            woken = await _wake(tx, state, now, room=0, at=at, line=line)
            if woken.woke:
                earliest = at if earliest is None else min(earliest, at)
        else:
            continue
        handed += woken.handed
        woke = woke or woken.woke
    return earliest, Woken(tuple(handed), woke)


async def _wake(
    tx: Tx,
    state: Row,
    now: float,
    *,
    room: float | None = None,
    at: float | None = None,
    near: int | None = None,
    holder: str = "",
    line: _Line | None = None,
) -> Woken:
    """Hand the room to the first waiters that fit (``room`` of them now), else wake the first when the
    window opens; and wake the parked runs among the ``near`` next, to wait near the head."""
    if _weighted(state):
        return (await _wake_units(tx, state, now, holder=holder))[0]
    if room is None:
        room, at = await _room(tx, state, now)
        near = _near(state)
    elif near is None:
        near = 0
    key = state["key"]
    limits = {k: state[k] for k in _LIMITS}
    n = int(min(room, 1_000_000))
    handed: list[Handed] = []
    woke = False
    if n > 0 or near > 0:
        heads = await _first_of(tx, line, key, n + near, now)
        parked = any(h["owner"] is None and (h["wake_at"] is None or float(h["wake_at"]) > now) for h in heads)
        # A slot never waits for a parked run ahead to be claimed and replayed: it goes to the first step waiting
        # in place in its worker, however far back, and the parked ones near the head, woken, wait there for the next.
        granted: list[int] = []  # the slots granted here, each a start in a rate window
        for head in await _first_of(tx, line, key, n, now, held=True):
            place = (head["run_id"], head["step_key"])
            if state["rate"] is not None and (head["owner"] != holder or state["burst"] is not None):
                # A rate window counts a start when it is granted: only a step that starts as this commits
                # (waiting in place in the worker that made room, or about to) is granted here; another is told
                # to ask. A key with a burst is a token bucket, which only ``acquire`` moves on: its waiters ask.
                handed.append(Handed(key, place[0], place[1], head["owner"], None))
                continue
            await tx.execute("stepflow_grant", {"id": head["id"], "epoch": head["epoch"], "now": now})
            granted.append(int(head["id"]))
            grant = _handed_grant(limits, now, head["waiting_since"], head["attempt"], head["first_at"])
            handed.append(Handed(key, place[0], place[1], head["owner"], grant))
        if granted and state["rate"] is not None:
            await tx.execute("stepflow_prune_starts", {"key": key, "before": now - float(state["period"])})
            for slot in granted:  # each names its slot: a run that parks before its step ran takes it back
                await tx.execute("stepflow_add_handed_start", {"key": key, "at": now, "slot": slot})
        if parked:  # silent where statements are pipelined: the parked ones among these, if any, are woken
            await tx.execute("stepflow_wake_waiters", {"key": key, "n": len(heads), "at": now, "now": now})
            woke = True
    if n <= 0 and at is not None:  # full for now: the first in line looks again when the window (or pause) lets it
        first_held = await _first_of(tx, line, key, 1, now, held=True)
        if first_held:  # waiting in its process: told when
            head = first_held[0]
            later = Grant(False, limits, retry_at=at)
            handed.append(Handed(key, head["run_id"], head["step_key"], head["owner"], later))
        heads = await _first_of(tx, line, key, 1, now)
        if heads and heads[0]["owner"] is None:  # parked at the head: claimed again by then
            await tx.execute("stepflow_wake_waiters", {"key": key, "n": 1, "at": at, "now": now})
            woke = True
    for owner in sorted({h.owner for h in handed if h.owner != holder and h.grant is not None}):
        await tx.execute("stepflow_notify", {"channel": "flow", "owner": owner})
    for owner in sorted({h.owner for h in handed if h.owner != holder and h.grant is None}):
        await tx.execute("stepflow_notify", {"channel": "flow-ask", "owner": owner})
    return Woken(tuple(handed), woke)


async def _first_of(tx: Tx, line: _Line | None, key: str, n: int, now: float, held: bool = False) -> list[Row]:
    """The first ``n`` of the key's line (``held``: of those waiting in place), from ``line`` if it reached that far."""
    if n <= 0:
        return []
    found = None if line is None else line.first_held(n) if held else line.first(n)
    if found is not None:
        return found
    if held:
        return await tx.execute("stepflow_held_heads", {"key": key, "n": n, "now": now})
    return await tx.execute("stepflow_heads", {"key": key, "n": n})


def _held(head: Row, now: float) -> bool:
    return head["lease_until"] is not None and float(head["lease_until"]) >= now


async def handed_slots(tx: Tx, run_ids: list[str]) -> list[Row]:
    """The steps of ``run_ids`` that hold a slot (``key, run_id, step_key, epoch``): a worker told that a
    slot was handed to one of its waiters reads which."""
    return await tx.execute("stepflow_handed", {"ids": json.dumps(run_ids)})


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
    await set_bucket(tx, FLOW_SCOPE, limits["key"], taken.anchor, taken.n, taken.last)
    return bucket_opens(taken, rate, period, burst, now), on_burst


async def _bucket(tx: Tx, limits: Row) -> tuple[Bucket | None, int, float, int]:
    """A burst key's bucket as stored, and its rate, period and burst."""
    found = await bucket_state(tx, FLOW_SCOPE, limits["key"])
    bucket = None if found is None else Bucket(*found)
    return bucket, int(limits["rate"]), float(limits["period"]), int(limits["burst"])


async def parked_runs(tx: Tx, workflow: str | None = None) -> list[Row]:
    """Runs parked waiting for a step flow-control key, per workflow (``workflow, n``)."""
    return await tx.execute("stepflow_parked_runs", {"workflow": workflow})


def lock_names(keys: list[str]) -> list[str]:
    """The ``lock_key`` names of flow ``keys`` (declared to a group commit: ``coalesce.with_locks``)."""
    return [lock_name(FLOW_SCOPE, key) for key in keys]


with_locks(acquire, lambda args, kwargs: lock_names([args[1]]))
with_locks(release, lambda args, kwargs: lock_names([args[0]]))
