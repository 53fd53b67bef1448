"""A group commit's offers decided together, as ``offer`` would decide them one after the other.

Fresh arrivals that nothing but their flow controls can hold (``in_memory``) are decided by
one general decider: the keys they need are locked in the order the stages take them, the
state of those keys is read once (window hits, slot queues, open groups), the arrivals are
walked in order applying the same ``rules`` to that state kept in memory, and the parked,
dropped or folded ones' rows are written with multi-row statements. Every other offer goes
through the pipeline one by one (``offer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..plan import Window
from ..store import gate
from ..store.base import Row, Tx
from ..store.coalesce import Args, with_many
from .admit import admit
from .keys import batch_group, debounce_group, key_pause_scopes, slot_of
from .offer import Decision, Offer
from .parking import arrival_rows, ledger_row
from .rules import (
    batch_fold,
    batch_full,
    batch_opens,
    concurrency_admits,
    debounce_fold,
    debounce_opens,
    folded_into,
    rate_limit_refusal,
    throttle_due,
    window_opens,
)
from .stages import flush_batch, offer

__all__ = ["in_memory", "offer_many"]


class _Arrival(NamedTuple):
    """An arrival to decide in memory, with the one window it meets (if any) and that window's key."""

    o: Offer
    now: float
    window: Window | None
    key: gate.Slot


async def offer_many(tx: Tx, calls: Sequence[Args]) -> list[Decision]:
    """``offer`` for each of a group commit's calls, in order; runs of arrivals ``in_memory`` decided together.

    Each run is decided once the offers before it are, and an admission (or any write that
    records a ledger row) goes out once the rows decided before it are written, so ledger
    ids keep the order of the decisions.
    """
    decisions: list[Decision] = []
    locked: set[gate.Slot] = set()  # advisory locks are held until commit: one take per key is enough
    run: list[_Arrival] = []
    for args, kwargs in calls:
        o, now = _offer_args(args, kwargs)
        if in_memory(o, now):
            run.append(_arrival(o, now))
            continue
        decisions += await _decide(tx, run, locked)
        run = []
        decisions.append(await offer(tx, o, now))
    decisions += await _decide(tx, run, locked)
    return decisions


def _arrival(o: Offer, now: float) -> _Arrival:
    if not o.plan.windows:
        return _Arrival(o, now, None, ("", ""))
    w = o.plan.windows[0]  # at most one (``in_memory``)
    return _Arrival(o, now, w, (w.scope, o.keys.get(w.name, "")))


def _offer_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Offer, float]:
    bound = {**dict(zip(("o", "now"), args, strict=False)), **kwargs}
    return bound["o"], bound["now"]


def in_memory(o: Offer, now: float) -> bool:
    """Whether ``o`` is a fresh arrival the decider can judge from its keys' state alone.

    Not so, and decided by ``offer``: a parked row, a start with an idempotency key (the
    identity stage reads it), one without a pause snapshot, one delayed, one a pause holds,
    a singleton (its incumbents are read per start), a total (it counts the whole scope),
    more than one window (their locks are taken in declaration order, per start), or a
    throttle with a burst (its token bucket is read and moved per start).
    """
    plan, c = o.plan, o.plan.concurrency
    return (
        o.pending is None
        and o.identity is None
        and o.pauses is not None
        and (o.at is None or o.at <= now)
        and plan.singleton is None
        and (c is None or c.total is None)
        and len(plan.windows) <= 1
        and (not plan.windows or plan.windows[0].burst is None)
        and gate.pause_in(o.pauses, [f"wf:{o.workflow}", *key_pause_scopes(plan, o.keys)], now) is None
    )


async def _decide(tx: Tx, run: list[_Arrival], locked: set[gate.Slot]) -> list[Decision]:
    """Decide a run of ``in_memory`` arrivals in order.

    A full batch is offered through the pipeline at once; when that may take a slot or a
    window hit the state in memory no longer knows of, the rest of the run is read again.
    """
    decisions: list[Decision] = []
    while run:
        walk = _Walk(tx)
        await walk.read(run, locked)
        done = 0
        for arrival in run:
            decisions.append(await walk.arrive(arrival))
            done += 1
            if walk.stale:
                break
        await walk.write()
        run = run[done:]
    return decisions


def _gathers(o: Offer) -> bool:
    return o.plan.debounce is not None or o.plan.batch is not None


def _group_key(o: Offer) -> str:
    return (debounce_group(o) if o.plan.debounce is not None else batch_group(o))[1]


def _nth(queue: gate.WindowQueue, limit: int) -> float | None:
    """The window key's ``limit``-th most recent hit, as ``window_nth`` reads it (before its age is judged)."""
    return queue.hits.get(queue.top - (limit - 1))


async def _lock_keys(tx: Tx, keys: list[gate.Slot], locked: set[gate.Slot]) -> None:
    for key in sorted(keys):  # one order: two processes' bursts never wait on each other in a cycle
        if key not in locked:
            await gate.lock_key(tx, *key)
            locked.add(key)


class _Walk:
    """One pass over a run: its keys' state in memory, and the rows decided but not yet written."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx
        self.windows: dict[gate.Slot, gate.WindowQueue] = {}
        self.groups: dict[str, Row] = {}
        self.slots: dict[gate.Slot, tuple[bool, int]] = {}  # (a start waits there, slots in use)
        self.folded: set[str] = set()  # open groups whose row the folds changed
        self.decided: list[tuple[Row, Row | None]] = []  # ledger rows (and pending rows) not written yet
        self.stale = False  # a batch offered through the pipeline may have changed the state read

    async def read(self, run: list[_Arrival], locked: set[gate.Slot]) -> None:
        """Lock the keys the run's arrivals reach, in the stages' order, then read their state once."""
        limits: dict[gate.Slot, int] = {}
        rate: set[gate.Slot] = set()
        groups: set[gate.Slot] = set()
        throttled: set[gate.Slot] = set()
        slotted: set[gate.Slot] = set()
        for o, _, w, key in run:
            plan = o.plan
            if w is not None and (w.kind == "rate_limit" or not _gathers(o)):  # a gathered start stops at its group
                (rate if w.kind == "rate_limit" else throttled).add(key)
                limits[key] = max(limits.get(key, 0), w.limit)
            if _gathers(o):
                groups.add(("group", _group_key(o)))
            elif plan.concurrency is not None:
                slotted.add(slot_of(plan, o.keys))
        for keys in (rate, groups, throttled, slotted):
            await _lock_keys(self.tx, sorted(keys), locked)
        # read after the locks: no other process decides these keys now
        if limits:
            self.windows = await gate.window_queues(self.tx, [(*k, n) for k, n in sorted(limits.items())])
        if groups:
            self.groups = dict(await gate.open_groups(self.tx, [g for _, g in sorted(groups)]))
        if slotted:
            self.slots = await gate.slot_queues(self.tx, sorted(slotted))

    async def write(self) -> None:
        """Write the rows decided since the last write, and where the folds left each open group."""
        await self._flush()
        for group in sorted(self.folded):
            await gate.refold_pending(self.tx, self.groups[group])
        self.folded.clear()

    async def _flush(self, *more: tuple[Row, Row | None]) -> None:
        await gate.park_arrivals(self.tx, [*self.decided, *more])
        self.decided = []

    async def arrive(self, arrival: _Arrival) -> Decision:
        """Decide an arrival as the stages would: rate limit, debounce or batch, throttle, concurrency, admit."""
        o, now, w, key = arrival
        if w is not None and w.kind == "rate_limit":
            dropped = await self._rate_limit(o, now, w, key)
            if dropped is not None:
                return dropped
        if _gathers(o):
            return await self._gather(o, now)
        throttle = w if w is not None and w.kind == "throttle" else None
        return (
            (throttle is not None and await self._throttle(o, now, throttle, key))
            or await self._concurrency(o, now)
            or await self._admit(o, now, throttle, key)
        )

    async def _rate_limit(self, o: Offer, now: float, w: Window, key: gate.Slot) -> Decision | None:
        queue = self.windows[key]
        opens = window_opens(_nth(queue, w.limit), w.period, now)
        if opens is not None:
            retry, reason = rate_limit_refusal(w.limit, w.period, opens, now)
            row = ledger_row(
                o, now, outcome="dropped", control="rate_limit", key=key[1], reason=reason, run_id=None, pending_id=None
            )
            self.decided.append((row, None))
            return Decision("dropped", o.ticket, retry_after=retry, key=key[1])
        # a rate limit counts the arrival as it passes; a throttle, the admission
        await gate.add_window_hit(self.tx, w.scope, key[1], now, w.period)
        queue.hit(now, w.period)
        return None

    async def _gather(self, o: Offer, now: float) -> Decision:
        """Open ``o``'s group, or fold ``o`` into it (a batch filled then is offered at once)."""
        opens = debounce_opens(o, now) if o.plan.debounce is not None else batch_opens(o, now)
        mode, key, group = opens["mode"], opens["key"], opens["group_key"]
        row = self.groups.get(group)
        if row is None:
            ledger, pending = arrival_rows(o, now, **opens)
            # Written at once: the group's later arrivals' ledger rows name it, and its seq is its own ledger row's.
            await self._flush((ledger, pending))
            row = self.groups[group] = {**gate.PENDING_DEFAULTS, **pending}
            full = mode == "batch" and batch_full(o, 1)
        else:
            fields, reason, full = _folded(o, row, now)
            row = self.groups[group] = {**row, **fields, "folded": int(row["folded"]) + 1, "last_at": now}
            self.folded.add(group)
            outcome = "batched" if mode == "batch" else "collapsed"
            self.decided.append(
                (ledger_row(o, now, outcome=outcome, control=mode, key=key, reason=reason, run_id=None,
                            pending_id=row["id"]), None)
            )  # fmt: skip
            if full:  # written as it stands, then offered
                await self._flush()
                await gate.refold_pending(self.tx, row)
                self.folded.discard(group)
        if not full:
            return Decision("queued", o.ticket, pending_id=row["id"], mode=mode, due_at=row["due_at"], key=key)
        stored = await gate.get_pending(self.tx, row["id"])
        assert stored is not None
        decision = await flush_batch(self.tx, o, stored, now)
        del self.groups[group]  # offered: the key's next item opens a new batch
        self.stale = bool(o.plan.throttles or o.plan.concurrency)
        return decision

    async def _throttle(self, o: Offer, now: float, w: Window, key: gate.Slot) -> Decision | None:
        queue = self.windows[key]
        due = throttle_due(window_opens(_nth(queue, w.limit), w.period, now), queue.ahead, now)
        if due is None:
            return None
        ledger, pending = arrival_rows(o, now, mode="throttle", stage="throttle", due=due, scope=key[0], key=key[1])
        self.decided.append((ledger, pending))
        queue.ahead = True  # every later arrival on this key waits behind this one
        return Decision("queued", o.ticket, pending_id=pending["id"], mode="throttle", due_at=due, key=key[1])

    async def _concurrency(self, o: Offer, now: float) -> Decision | None:
        c = o.plan.concurrency
        if c is None:
            return None
        slot = slot_of(o.plan, o.keys)
        ahead, used = self.slots[slot]
        if concurrency_admits(c, used, ahead):
            return None
        ledger, pending = arrival_rows(
            o, now, mode="concurrency", stage="key_pause", due=None, scope=slot[0], key=slot[1]
        )
        self.decided.append((ledger, pending))
        self.slots[slot] = (True, used)  # every later arrival on this key waits behind this one
        return Decision("queued", o.ticket, pending_id=pending["id"], mode="concurrency", key=slot[1])

    async def _admit(self, o: Offer, now: float, throttle: Window | None, key: gate.Slot) -> Decision:
        await self._flush()
        decision = await admit(self.tx, o, now)
        if decision.status != "started":
            return decision
        if throttle is not None:  # as ``admit`` counts the throttle's hit
            self.windows[key].hit(now, throttle.period)
        if o.plan.concurrency is not None:
            slot = slot_of(o.plan, o.keys)
            ahead, used = self.slots[slot]
            self.slots[slot] = (ahead, used + 1)
        return decision


def _folded(o: Offer, row: Row, now: float) -> tuple[dict[str, Any], str, bool]:
    """Folding ``o`` into its open group ``row``: the row's changed fields, the ledger row's reason, and
    whether the group is then full (a batch at its ``max_size``)."""
    if o.plan.debounce is not None:
        return debounce_fold(o, row, now), folded_into(row), False
    items, size, reason = batch_fold(row, o)
    fields = {
        "items": items,
        "identity": None,
        "idempotency_key": None,
        "priority": max(o.priority, int(row["priority"])),
    }
    return fields, reason, batch_full(o, size)


with_many(offer, offer_many)
