"""The pipeline one offer at a time: each stage, in the order DESIGN.md §4 gives.

An offer is a fresh arrival or a parked row the drainer re-offers; a parked row resumes
at the stage it stopped at. Each stage returns a ``Decision`` that ends the offer, or
``None`` to pass it on; the stages read and write what they judge one statement at a time
and ask ``rules`` for the verdict.
"""

from __future__ import annotations

from ..plan import GatePlan
from ..store import gate
from ..store.base import Row, Tx
from .admit import admit
from .keys import batch_group, debounce_group, key_pause_scopes, singleton_key, slot_of
from .offer import Decision, Offer, Stage, reoffer
from .parking import end_parked, fold, park, record
from .rules import (
    Bucket,
    batch_fold,
    batch_full,
    batch_opens,
    bucket_opens,
    concurrency_admits,
    concurrency_room,
    debounce_fold,
    debounce_opens,
    folded_into,
    rate_limit_refusal,
    throttle_due,
    window_opens,
)

__all__ = ["STAGES", "flush_batch", "has_room", "offer", "room"]

STAGES = (
    "identity",
    "pause",
    "delayed",
    "rate_limit",
    "debounce",
    "batch",
    "singleton",
    "key_pause",
    "throttle",
    "concurrency",
    "admit",
)


async def offer(tx: Tx, o: Offer, now: float) -> Decision:
    """Run the offer through the pipeline from its stage; exactly one decision."""
    start = STAGES.index(o.pending["stage"]) if o.pending is not None else 0
    for name in STAGES[start:]:
        decision = await _STAGES[name](tx, o, now)
        if decision is not None:
            return decision
    raise AssertionError("the admit stage always decides")


async def _identity(tx: Tx, o: Offer, now: float) -> Decision | None:
    if o.identity is None:
        return None
    run_id = await tx.scalar("run_id_by_identity", {"identity": o.identity})
    if run_id is not None:
        await record(
            tx, o, now, outcome="existing", control="identity", run_id=run_id, reason="idempotency key already spent"
        )
        return Decision("existing", o.ticket, run_id=run_id, reason="idempotency key already spent")
    parked = await tx.one("pending_by_identity", {"identity": o.identity})
    if parked is not None:
        await record(
            tx,
            o,
            now,
            outcome="existing",
            control="identity",
            pending_id=parked["id"],
            reason="a parked start holds this idempotency key",
        )
        # the handle names this arrival (its own ledger row points at the parked start it deferred to)
        return Decision(
            "existing", o.ticket, pending_id=parked["id"], reason="a parked start holds this idempotency key"
        )
    return None


async def _paused(tx: Tx, o: Offer, scopes: list[str], now: float) -> Row | None:
    """The pause holding ``scopes``, as it stands in this transaction.

    With a snapshot of pauses, a start none holds passes at once (a pause begun since reaches
    every process within a second). One the snapshot shows held is checked in the transaction:
    the pause may have been lifted since, and a start parked by a lifted pause would wait for
    a release that already happened.
    """
    if o.pauses is not None and gate.pause_in(o.pauses, scopes, now) is None:
        return None
    return await gate.active_pause(tx, scopes, now)


async def _pause(tx: Tx, o: Offer, now: float) -> Decision | None:
    paused = await _paused(tx, o, [f"wf:{o.workflow}"], now)
    if paused is None:
        return None
    return await park(tx, o, now, mode="paused", stage="delayed", due=None, reason=paused["reason"])


async def _delayed(tx: Tx, o: Offer, now: float) -> Decision | None:
    if o.at is None or o.at <= now:
        return None
    return await park(tx, o, now, mode="delayed", stage="rate_limit", due=o.at)


async def _window_room(tx: Tx, scope: str, key: str, limit: int, period: float, now: float) -> float | None:
    """``None`` when the window has room, else the instant a slot in it opens."""
    await gate.lock_key(tx, scope, key)
    return window_opens(await gate.window_opens(tx, scope, key, now - period, limit), period, now)


async def _bucket_room(tx: Tx, scope: str, key: str, limit: int, period: float, burst: int, now: float) -> float | None:
    """As ``_window_room``, for a throttle with a burst (a token bucket)."""
    await gate.lock_key(tx, scope, key)
    state = await gate.bucket_state(tx, scope, key)
    return bucket_opens(None if state is None else Bucket(*state), limit, period, burst, now)


async def _rate_limit(tx: Tx, o: Offer, now: float) -> Decision | None:
    windows = o.plan.rate_limits
    for w in windows:
        key = o.keys.get(w.name, "")
        opens = await _window_room(tx, w.scope, key, w.limit, w.period, now)
        if opens is not None:
            retry, reason = rate_limit_refusal(w.limit, w.period, opens, now)
            await record(tx, o, now, outcome="dropped", control="rate_limit", key=key, reason=reason)
            await end_parked(tx, o)
            return Decision("dropped", o.ticket, retry_after=retry, key=key)
    for w in windows:
        await gate.add_window_hit(tx, w.scope, o.keys.get(w.name, ""), now, w.period)
    return None


async def _debounce(tx: Tx, o: Offer, now: float) -> Decision | None:
    # A parked row meets this stage only before it joined a group: a paused or delayed start, now arriving.
    if o.plan.debounce is None:
        return None
    key, group = debounce_group(o)
    await gate.lock_key(tx, "group", group)  # replicas folding into one group queue here, not on its index
    row = await tx.one("open_group", {"group_key": group})
    if row is None:
        return await park(tx, o, now, **debounce_opens(o, now))
    folded = debounce_fold(o, row, now)
    await fold(
        tx,
        o,
        row,
        now,
        payload=folded["payload"],
        items=folded["items"],
        identity=folded["identity"],
        idem=folded["idempotency_key"],
        due=folded["due_at"],
        keys=folded["keys"],
        outcome="collapsed",
        control="debounce",
        key=key,
        reason=folded_into(row),
    )
    return Decision("queued", o.ticket, pending_id=row["id"], mode="debounce", due_at=folded["due_at"], key=key)


async def _batch(tx: Tx, o: Offer, now: float) -> Decision | None:
    # As for debounce: a parked row here is a paused or delayed item, now arriving.
    if o.plan.batch is None:
        return None
    key, group = batch_group(o)
    await gate.lock_key(tx, "group", group)
    row = await tx.one("open_group", {"group_key": group})
    if row is None:
        decision = await park(tx, o, now, **batch_opens(o, now))
        if not batch_full(o, 1):
            return decision
        row = await gate.get_pending(tx, decision.pending_id or "")
        assert row is not None
    else:
        items, size, reason = batch_fold(row, o)
        await fold(
            tx,
            o,
            row,
            now,
            payload=row["payload"],
            items=items,
            identity=None,
            idem=None,
            due=row["due_at"],
            keys=row["keys"],
            outcome="batched",
            control="batch",
            key=key,
            reason=reason,
        )
        if not batch_full(o, size):
            return Decision("queued", o.ticket, pending_id=row["id"], mode="batch", due_at=row["due_at"], key=key)
        row = await gate.get_pending(tx, row["id"])
        assert row is not None
    return await flush_batch(tx, o, row, now)


async def flush_batch(tx: Tx, o: Offer, row: Row, now: float) -> Decision:
    """The batch ``row`` is full with ``o``: offer it now, in this transaction; ``o``'s decision."""
    key = batch_group(o)[0]
    flushed = await offer(tx, reoffer(o.defn, row, o.run), now)
    if flushed.status != "queued":  # started, or ended by a later stage (existing, skipped): say so
        return Decision(
            flushed.status,
            o.ticket,
            run_id=flushed.run_id,
            pending_id=row["id"],
            mode="batch",
            key=key,
            reason=flushed.reason,
            stopped=flushed.stopped,
        )
    return Decision(
        "queued", o.ticket, pending_id=row["id"], mode=flushed.mode or "batch", due_at=flushed.due_at, key=key
    )


async def _singleton(tx: Tx, o: Offer, now: float) -> Decision | None:
    s = o.plan.singleton
    if s is None:
        return None
    skey = singleton_key(o)
    # Held until commit, through the admission: replicas deciding for one key take turns (both modes).
    await gate.lock_key(tx, "singleton", skey or "")
    if s.mode != "skip":
        return None
    incumbent = await tx.scalar("singleton_incumbent", {"singleton_key": skey})
    parked = None
    if incumbent is None:
        parked = await tx.one(
            "singleton_pending", {"singleton_key": skey, "exclude": "" if o.pending is None else o.pending["id"]}
        )
        if parked is None:
            return None
    key = o.keys.get("singleton", "")
    held_by = incumbent or (parked or {}).get("ticket")
    await record(
        tx, o, now, outcome="skipped", control="singleton", key=key, run_id=incumbent, reason=f"held by {held_by}"
    )
    await end_parked(tx, o)
    return Decision("skipped", o.ticket, run_id=incumbent, key=key, reason=f"held by {held_by}")


async def _key_pause(tx: Tx, o: Offer, now: float) -> Decision | None:
    scopes = key_pause_scopes(o.plan, o.keys)
    if not scopes:
        return None
    paused = await _paused(tx, o, scopes, now)
    if paused is None:
        return None
    key = str(paused["scope"]).removeprefix("key:")
    due = None if paused["until"] is None else float(paused["until"])
    return await park(
        tx, o, now, mode="key-paused", stage="key_pause", due=due, scope="key", key=key, reason=paused["reason"]
    )


async def _throttle(tx: Tx, o: Offer, now: float) -> Decision | None:
    windows = o.plan.throttles
    if not windows:
        return None
    latest: tuple[float, str, str] | None = None
    for w in windows:
        key = o.keys.get(w.name, "")
        if w.burst is None:
            opens = await _window_room(tx, w.scope, key, w.limit, w.period, now)
        else:
            opens = await _bucket_room(tx, w.scope, key, w.limit, w.period, w.burst, now)
        if opens is None and o.pending is None:  # earlier starts waiting for this window: queue behind them
            waiting = await tx.one("waiting_ahead", {"mode": "throttle", "scope": w.scope, "key": key}) is not None
            opens = throttle_due(opens, waiting, now)
        if opens is not None and (latest is None or opens > latest[0]):
            latest = (opens, w.scope, key)
    if latest is not None:
        return await park(tx, o, now, mode="throttle", stage="throttle", due=latest[0], scope=latest[1], key=latest[2])
    return None  # the hit is counted when the run is admitted (``admit``), not while a slot is awaited


async def _concurrency(tx: Tx, o: Offer, now: float) -> Decision | None:
    c = o.plan.concurrency
    if c is None:
        return None
    scope, key = slot_of(o.plan, o.keys)
    await gate.lock_key(tx, scope, key)
    if c.total is not None:
        await gate.lock_key(tx, scope, "")
    waiting = (
        o.pending is None
        and await tx.one("waiting_ahead", {"mode": "concurrency", "scope": scope, "key": key}) is not None
    )
    used, in_scope = (0, 0) if waiting else await _usage(tx, o.plan, key)  # waiting: no room is asked for
    if concurrency_admits(c, used, waiting, in_scope):
        return None
    # re-offered from the key pause on: a key paused or a throttle window filled meanwhile holds it too
    return await park(tx, o, now, mode="concurrency", stage="key_pause", due=None, scope=scope, key=key)


async def has_room(tx: Tx, plan: GatePlan, key: str) -> bool:
    """Whether one more run of ``key`` fits the concurrency control (limit, total, burst)."""
    return await room(tx, plan, key) > 0


async def room(tx: Tx, plan: GatePlan, key: str) -> int:
    """How many more runs of ``key`` fit the concurrency control (``rules.concurrency_room``), as stored now."""
    c = plan.concurrency
    assert c is not None
    return concurrency_room(c, *await _usage(tx, plan, key))


async def _usage(tx: Tx, plan: GatePlan, key: str) -> tuple[int, int]:
    """The slots ``key`` holds, and those of its whole scope where a ``total`` caps them (else 0)."""
    used = await gate.slots_in_use(tx, plan.concurrency_scope, key)
    c = plan.concurrency
    in_scope = 0 if c is None or c.total is None else await gate.slots_in_scope(tx, plan.concurrency_scope)
    return used, in_scope


_STAGES: dict[str, Stage] = {
    "identity": _identity,
    "pause": _pause,
    "delayed": _delayed,
    "rate_limit": _rate_limit,
    "debounce": _debounce,
    "batch": _batch,
    "singleton": _singleton,
    "key_pause": _key_pause,
    "throttle": _throttle,
    "concurrency": _concurrency,
    "admit": admit,
}
