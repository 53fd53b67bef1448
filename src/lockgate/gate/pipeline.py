"""The gate's pipeline: one offer, decided in one transaction, with its ledger row.

An offer is a fresh arrival or a parked row the drainer re-offers; a parked row
resumes at the stage it stopped at. The stages run in the order DESIGN.md §4 gives:
identity, pause, delayed, rate limit, debounce, batch, singleton, key pause, throttle,
concurrency, admit. Each returns a ``Decision`` that ends the offer, or ``None`` to
pass it on. A group commit's run of offers is decided by ``offer_many``: fresh arrivals
that wait for nothing but a concurrency slot together, every other offer as ``offer``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..definitions import WorkflowDef
from ..ids import new_id
from ..plan import GatePlan
from ..store import gate, runs
from ..store.base import Row, Tx
from ..store.coalesce import Args, with_many

__all__ = ["STAGES", "Decision", "Offer", "admitted", "flow_keys", "offer", "offer_many", "plain_row"]

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


@dataclass
class Offer:
    """Everything the pipeline needs, computed outside the transaction (keys, priority, identity)."""

    defn: WorkflowDef
    plan: GatePlan
    ticket: str
    payload: str  # the run payload as JSON (for a batch or keep="all" arrival: the item)
    keys: dict[str, str]
    priority: int
    fair: str | None
    identity: str | None
    idempotency_key: str | None
    run: dict[str, Any]  # the run row template (id, version, patches, recording, ...)
    at: float | None = None
    pending: Row | None = None  # set when the drainer re-offers a parked row
    pauses: dict[str, Row] | None = None  # a snapshot of active pauses (None: read them in the transaction)

    @property
    def workflow(self) -> str:
        return self.defn.name


@dataclass
class Decision:
    """What became of one offer."""

    status: str  # started | existing | queued | dropped | skipped | expired
    ticket: str
    run_id: str | None = None
    pending_id: str | None = None
    mode: str | None = None
    due_at: float | None = None
    key: str | None = None
    retry_after: float | None = None
    reason: str | None = None
    stopped: list[str] = field(default_factory=list)  # runs ended by this decision (singleton eviction)


Stage = Callable[[Tx, Offer, float], Awaitable[Decision | None]]


async def offer(tx: Tx, o: Offer, now: float) -> Decision:
    """Run the offer through the pipeline from its stage; exactly one decision."""
    start = STAGES.index(o.pending["stage"]) if o.pending is not None else 0
    for name in STAGES[start:]:
        decision = await _STAGES[name](tx, o, now)
        if decision is not None:
            return decision
    raise AssertionError("the admit stage always decides")


# -- ledger and parking -------------------------------------------------------------------


async def _record(
    tx: Tx,
    o: Offer,
    now: float,
    *,
    outcome: str,
    control: str | None,
    key: str | None = None,
    reason: str | None = None,
    run_id: str | None = None,
    pending_id: str | None = None,
) -> int:
    return await gate.ledger(
        tx,
        **_ledger_row(
            o, now, outcome=outcome, control=control, key=key, reason=reason, run_id=run_id, pending_id=pending_id
        ),
    )


def _ledger_row(
    o: Offer,
    now: float,
    *,
    outcome: str,
    control: str | None,
    key: str | None,
    reason: str | None,
    run_id: str | None,
    pending_id: str | None,
) -> Row:
    """The ledger row of one decision on ``o``: its arrival's, or a drain's for a parked row."""
    row = o.pending
    return {
        "ticket": o.ticket,
        "kind": "arrival" if row is None else "drain",
        "workflow": o.workflow,
        "control": control,
        "key": key,
        "outcome": outcome,
        "reason": reason,
        "folded": 1 if row is None else int(row["folded"]),
        "waited": None if row is None else now - float(row["first_at"]),
        "pending_id": pending_id,
        "run_id": run_id,
        "at": now,
    }


async def _park(
    tx: Tx,
    o: Offer,
    now: float,
    *,
    mode: str,
    stage: str,
    due: float | None,
    scope: str | None = None,
    key: str | None = None,
    reason: str | None = None,
    group_key: str | None = None,
    items: list[str] | None = None,
) -> Decision:
    row = o.pending
    if row is None:
        ledger, pending = _arrival_rows(
            o,
            now,
            mode=mode,
            stage=stage,
            due=due,
            scope=scope,
            key=key,
            reason=reason,
            group_key=group_key,
            items=items,
        )
        await gate.insert_pending(tx, {**pending, "seq": await gate.ledger(tx, **ledger)})
        pending_id = pending["id"]
    else:
        pending_id = row["id"]
        if row["mode"] != mode:
            await _record(tx, o, now, outcome="queued", control=mode, key=key, reason=reason, pending_id=pending_id)
        await tx.execute(
            "repark_pending",
            {
                "id": pending_id,
                "mode": mode,
                "stage": stage,
                "hold_scope": scope,
                "hold_key": key,
                "group_key": group_key,
                "payload": o.payload,
                "items": row["items"] if items is None else json.dumps(items),
                "keys": json.dumps(o.keys),
                "identity": o.identity,
                "idempotency_key": o.idempotency_key,
                "due_at": due,
            },
        )
    return Decision("queued", o.ticket, pending_id=pending_id, mode=mode, due_at=due, key=key, reason=reason)


def _arrival_rows(
    o: Offer,
    now: float,
    *,
    mode: str,
    stage: str,
    due: float | None,
    scope: str | None = None,
    key: str | None = None,
    reason: str | None = None,
    group_key: str | None = None,
    items: list[str] | None = None,
) -> tuple[Row, Row]:
    """A fresh arrival parked: its ledger row and its pending row, whose ``seq`` is to be the ledger row's id."""
    pending_id = new_id("pnd")
    ledger = _ledger_row(
        o,
        now,
        outcome="batched" if mode == "batch" else "queued",
        control=mode,
        key=key,
        reason=reason,
        run_id=None,
        pending_id=pending_id,
    )
    timeout = o.plan.start_timeout
    arrives = due if mode == "delayed" and due is not None else now  # a delayed start arrives at ``at``
    pending = {
        "id": pending_id,
        "workflow": o.workflow,
        "ticket": o.ticket,
        "mode": mode,
        "stage": stage,
        "hold_scope": scope,
        "hold_key": key,
        "group_key": group_key,
        "singleton_key": _singleton_key(o),
        "payload": o.payload,
        "items": None if items is None else json.dumps(items),
        "keys": json.dumps(o.keys),
        "identity": o.identity,
        "idempotency_key": o.idempotency_key,
        "priority": o.priority,
        "fair_key": o.fair,
        "on_failure": o.plan.on_failure,
        "retry_of": o.run.get("retry_of"),
        "first_at": now,
        "last_at": now,
        "due_at": due,
        "expires_at": None if timeout is None else arrives + timeout,
    }
    return ledger, pending


async def _end_parked(tx: Tx, o: Offer) -> None:
    if o.pending is not None:
        await gate.delete_pending(tx, o.pending["id"])


def primary_key(o: Offer) -> str | None:
    """The key an offer is counted under in ``flow()``: its concurrency key, else its first window's, ..."""
    plan = o.plan
    for name in ("concurrency", *(w.name for w in plan.windows), "singleton", "debounce", "batch"):
        if name in o.keys:
            return o.keys[name]
    return None


def _singleton_key(o: Offer) -> str | None:
    return None if o.plan.singleton is None else f"{o.workflow}\x1f{o.keys.get('singleton', '')}"


# -- stages ----------------------------------------------------------------------------------


async def _identity(tx: Tx, o: Offer, now: float) -> Decision | None:
    if o.identity is None:
        return None
    run_id = await tx.scalar("run_id_by_identity", {"identity": o.identity})
    if run_id is not None:
        await _record(
            tx, o, now, outcome="existing", control="identity", run_id=run_id, reason="idempotency key already spent"
        )
        return Decision("existing", o.ticket, run_id=run_id, reason="idempotency key already spent")
    parked = await tx.one("pending_by_identity", {"identity": o.identity})
    if parked is not None:
        await _record(
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
    return await _park(tx, o, now, mode="paused", stage="delayed", due=None, reason=paused["reason"])


async def _delayed(tx: Tx, o: Offer, now: float) -> Decision | None:
    if o.at is None or o.at <= now:
        return None
    return await _park(tx, o, now, mode="delayed", stage="rate_limit", due=o.at)


async def _window_room(tx: Tx, scope: str, key: str, limit: int, period: float, now: float) -> float | None:
    """``None`` when the window has room, else the instant a slot in it opens."""
    await gate.lock_key(tx, scope, key)
    oldest = await gate.window_opens(tx, scope, key, now - period, limit)
    return None if oldest is None else oldest + period


async def _rate_limit(tx: Tx, o: Offer, now: float) -> Decision | None:
    windows = o.plan.rate_limits
    for w in windows:
        key = o.keys.get(w.name, "")
        opens = await _window_room(tx, w.scope, key, w.limit, w.period, now)
        if opens is not None:
            retry = max(0.0, opens - now)
            await _record(
                tx,
                o,
                now,
                outcome="dropped",
                control="rate_limit",
                key=key,
                reason=f"{w.limit} per {w.period:g}s reached; retry after {retry:.3f}s",
            )
            await _end_parked(tx, o)
            return Decision("dropped", o.ticket, retry_after=retry, key=key)
    for w in windows:
        await gate.add_window_hit(tx, w.scope, o.keys.get(w.name, ""), now, w.period)
    return None


async def _debounce(tx: Tx, o: Offer, now: float) -> Decision | None:
    # A parked row meets this stage only before it joined a group: a paused or delayed start, now arriving.
    if o.plan.debounce is None:
        return None
    key, group = _debounce_group(o)
    await gate.lock_key(tx, "group", group)  # replicas folding into one group queue here, not on its index
    row = await tx.one("open_group", {"group_key": group})
    if row is None:
        return await _park(tx, o, now, **_debounce_opens(o, now))
    fold = _debounce_fold(o, row, now)
    await _fold(
        tx,
        o,
        row,
        now,
        payload=fold["payload"],
        items=fold["items"],
        identity=fold["identity"],
        idem=fold["idempotency_key"],
        due=fold["due_at"],
        keys=fold["keys"],
        outcome="collapsed",
        control="debounce",
        key=key,
        reason=_folded_into(row),
    )
    return Decision("queued", o.ticket, pending_id=row["id"], mode="debounce", due_at=fold["due_at"], key=key)


def _debounce_group(o: Offer) -> tuple[str, str]:
    """The debounce key of ``o`` and the group key of its open group."""
    key = o.keys.get("debounce", "")
    return key, f"debounce:{o.workflow}\x1f{key}"


def _debounce_opens(o: Offer, now: float) -> dict[str, Any]:
    """``_park``'s arguments for ``o`` opening its debounce group."""
    d, cap = o.plan.debounce, o.plan.debounce_timeout
    assert d is not None
    key, group = _debounce_group(o)
    return {
        "mode": "debounce",
        "stage": "singleton",
        "due": now + o.plan.debounce_period if cap is None else min(now + o.plan.debounce_period, now + cap),
        "scope": "debounce",
        "key": key,
        "group_key": group,
        "items": [o.payload] if d.keep == "all" else None,
    }


def _debounce_fold(o: Offer, row: Row, now: float) -> dict[str, Any]:
    """Where folding ``o`` into its open debounce group ``row`` leaves the group row's fields."""
    d, cap = o.plan.debounce, o.plan.debounce_timeout
    assert d is not None
    first_at = float(row["first_at"])
    due = now + o.plan.debounce_period if cap is None else min(now + o.plan.debounce_period, first_at + cap)
    payload, identity, idem = o.payload, o.identity, o.idempotency_key
    items: str | None = row["items"]
    if d.keep == "first":
        payload, identity, idem = row["payload"], row["identity"], row["idempotency_key"]
    elif d.keep == "all":
        items = json.dumps([*json.loads(items or "[]"), o.payload])
        payload, identity, idem = row["payload"], row["identity"], row["idempotency_key"]
    return {
        "payload": payload,
        "items": items,
        "identity": identity,
        "idempotency_key": idem,
        "due_at": due,
        "keys": json.dumps(o.keys) if d.keep == "last" else row["keys"],
        "priority": max(o.priority, int(row["priority"])),
        "fair_key": row["fair_key"],
    }


def _folded_into(row: Row) -> str:
    return f"folded into {row['ticket']} ({int(row['folded']) + 1} arrivals)"


async def _fold(
    tx: Tx,
    o: Offer,
    row: Row,
    now: float,
    *,
    payload: str,
    items: str | None,
    identity: str | None,
    idem: str | None,
    due: float | None,
    keys: str | None,
    outcome: str,
    control: str,
    key: str,
    reason: str,
) -> None:
    """Fold the offer into the open group ``row`` (debounce, batch) and record the arrival as folded."""
    await tx.execute(
        "fold_pending",
        {
            "id": row["id"],
            "payload": payload,
            "items": items,
            "identity": identity,
            "idempotency_key": idem,
            "now": now,
            "due_at": due,
            "keys": keys,
            "priority": max(o.priority, int(row["priority"])),
            "fair_key": row["fair_key"],
        },
    )
    await _record(tx, o, now, outcome=outcome, control=control, key=key, pending_id=row["id"], reason=reason)
    await _end_parked(tx, o)


async def _batch(tx: Tx, o: Offer, now: float) -> Decision | None:
    b = o.plan.batch  # as for debounce: a parked row here is a paused or delayed item, now arriving
    if b is None:
        return None
    key, group = _batch_group(o)
    await gate.lock_key(tx, "group", group)
    row = await tx.one("open_group", {"group_key": group})
    if row is None:
        decision = await _park(tx, o, now, **_batch_opens(o, now))
        if b.max_size > 1:
            return decision
        row = await gate.get_pending(tx, decision.pending_id or "")
        assert row is not None
    else:
        items, size, reason = _batch_fold(row, o)
        await _fold(
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
        if size < b.max_size:
            return Decision("queued", o.ticket, pending_id=row["id"], mode="batch", due_at=row["due_at"], key=key)
        row = await gate.get_pending(tx, row["id"])
        assert row is not None
    return await _flush_batch(tx, o, row, now)


def _batch_group(o: Offer) -> tuple[str, str]:
    """The batch key of ``o`` and the group key of its open batch."""
    key = o.keys.get("batch", "")
    return key, f"batch:{o.workflow}\x1f{key}"


def _batch_opens(o: Offer, now: float) -> dict[str, Any]:
    """``_park``'s arguments for ``o`` opening its batch."""
    key, group = _batch_group(o)
    return {
        "mode": "batch",
        "stage": "singleton",
        "due": now + o.plan.batch_timeout,
        "scope": "batch",
        "key": key,
        "group_key": group,
        "items": [o.payload],
    }


def _batch_fold(row: Row, o: Offer) -> tuple[str, int, str]:
    """The open batch ``row``'s items with ``o`` added (as stored, and how many), and the reason its ledger
    row gives."""
    items = [*json.loads(row["items"] or "[]"), o.payload]
    return json.dumps(items), len(items), f"item {len(items)} of batch {row['ticket']}"


async def _flush_batch(tx: Tx, o: Offer, row: Row, now: float) -> Decision:
    """The batch ``row`` is full with ``o``: offer it now, in this transaction; ``o``'s decision."""
    key = _batch_group(o)[0]
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
    skey = _singleton_key(o)
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
    await _record(
        tx, o, now, outcome="skipped", control="singleton", key=key, run_id=incumbent, reason=f"held by {held_by}"
    )
    await _end_parked(tx, o)
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
    return await _park(
        tx, o, now, mode="key-paused", stage="key_pause", due=due, scope="key", key=key, reason=paused["reason"]
    )


def plain_row(state: Row) -> bool:
    """Whether a parked row itself asks nothing of the pipeline: no identity to check, no items to merge,
    past entry (``pending_by_ids``'s columns)."""
    return (
        bool(state["keys"])  # a failure report's keys (and payload) are checked by the pipeline
        and state["identity"] is None
        and not state["has_items"]
        and state["stage"] not in _ENTRY_STAGES
    )


_ENTRY_STAGES = frozenset(("identity", "pause"))  # re-checked as a row passes them: the pipeline's business


def flow_keys(plan: GatePlan, keys: dict[str, str]) -> list[str]:
    """The flow-control keys a start with control ``keys`` competes under (a key pause on any of them holds it)."""
    found = []
    if plan.concurrency is not None:
        found.append(keys.get("concurrency", "") or plan.concurrency_scope)
        if plan.concurrency.pool:
            found.append(plan.concurrency.pool)
    for w in plan.windows:
        if w.kind == "throttle":
            found.append(keys.get(w.name, "") or w.scope)
    return [k for k in dict.fromkeys(found) if k]


def key_pause_scopes(plan: GatePlan, keys: dict[str, str]) -> list[str]:
    """The pause scopes (``key:<k>``) of which any holds a start with control ``keys``."""
    return [f"key:{k}" for k in flow_keys(plan, keys)]


def slot_of(plan: GatePlan, keys: dict[str, str]) -> gate.Slot:
    """The concurrency slot ``(scope, key)`` a start with control ``keys`` takes."""
    return plan.concurrency_scope, keys.get("concurrency", "")


async def _throttle(tx: Tx, o: Offer, now: float) -> Decision | None:
    windows = o.plan.throttles
    if not windows:
        return None
    latest: tuple[float, str, str] | None = None
    for w in windows:
        key = o.keys.get(w.name, "")
        opens = await _window_room(tx, w.scope, key, w.limit, w.period, now)
        if (
            opens is None
            and o.pending is None
            and await tx.one("waiting_ahead", {"mode": "throttle", "scope": w.scope, "key": key}) is not None
        ):
            opens = now  # earlier starts wait for this window: queue behind them
        if opens is not None and (latest is None or opens > latest[0]):
            latest = (opens, w.scope, key)
    if latest is not None:
        return await _park(tx, o, now, mode="throttle", stage="throttle", due=latest[0], scope=latest[1], key=latest[2])
    return None  # the hit is counted when the run is admitted (``_admit``), not while a slot is awaited


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
    if not waiting and await has_room(tx, o.plan, key):
        return None
    # re-offered from the key pause on: a key paused or a throttle window filled meanwhile holds it too
    return await _park(tx, o, now, mode="concurrency", stage="key_pause", due=None, scope=scope, key=key)


async def has_room(tx: Tx, plan: GatePlan, key: str) -> bool:
    """Whether one more run of ``key`` fits the concurrency control (limit, total, burst)."""
    c = plan.concurrency
    assert c is not None
    used = await gate.slots_in_use(tx, plan.concurrency_scope, key)
    if c.total is None:
        return used < c.limit
    total = await gate.slots_in_scope(tx, plan.concurrency_scope)
    if total >= c.total:
        return False
    return used < c.limit or (c.burst is not None and used < c.burst)


async def _admit(tx: Tx, o: Offer, now: float) -> Decision:
    plan, row = o.plan, o.pending
    payload, identity, idem = o.payload, o.identity, o.idempotency_key
    if (
        row is not None
        and row["items"] is not None
        and (plan.batch is not None or (plan.debounce is not None and plan.debounce.keep == "all"))
    ):
        model = o.defn.payload_model.model_validate({"items": [json.loads(i) for i in json.loads(row["items"])]})
        payload = model.model_dump_json()
        if o.defn.idempotency_key is not None and identity is None:
            idem = str(o.defn.idempotency_key(model))
            identity = f"{o.workflow}\x1f{idem}"
    run = admitted(
        plan,
        {**o.run, "payload": payload, "idempotency_key": idem, "ticket": o.ticket, "singleton_key": _singleton_key(o)},
        now,
    )
    if identity is not None:
        run["identity"] = identity
    if plan.concurrency is not None:
        run["slot_scope"], run["slot_key"] = slot_of(plan, o.keys)
    created, fresh = await runs.create_run(tx, run, now)
    if not fresh:
        await _record(
            tx,
            o,
            now,
            outcome="existing",
            control="identity",
            run_id=created["id"],
            pending_id=None if row is None else row["id"],
            reason="idempotency key already spent",
        )
        await _end_parked(tx, o)
        return Decision("existing", o.ticket, run_id=created["id"])
    run_id = created["id"]
    for w in plan.throttles:
        await gate.add_window_hit(tx, w.scope, o.keys.get(w.name, ""), now, w.period)
    if plan.concurrency is not None:
        await tx.execute(
            "take_slot",
            {
                "run_id": run_id,
                "scope": plan.concurrency_scope,
                "key": o.keys.get("concurrency", ""),
                "workflow": o.workflow,
                "now": now,
                "expires_at": run.get("deadline_at"),
            },
        )
    stopped: list[str] = []
    if plan.singleton is not None and plan.singleton.mode == "cancel":
        for incumbent in await tx.execute("singleton_incumbents", {"singleton_key": run["singleton_key"]}):
            if incumbent["id"] != run_id:
                stopped += await runs.cancel_run(tx, incumbent["id"], f"singleton: replaced by {run_id}", now)
    await _record(
        tx,
        o,
        now,
        outcome="admitted",
        control=None if row is None else row["mode"],
        key=primary_key(o) if row is None else row["hold_key"],
        run_id=run_id,
        pending_id=None if row is None else row["id"],
    )
    await _end_parked(tx, o)
    return Decision("started", o.ticket, run_id=run_id, stopped=stopped)


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
    "admit": _admit,
}


def admitted(plan: GatePlan, run: dict[str, Any], now: float) -> dict[str, Any]:
    """What admission adds to a run row: its failure handler, and its deadline (``timeouts.finish``)."""
    run = {**run, "on_failure": plan.on_failure}
    if plan.finish_timeout is not None:
        run["deadline_at"] = now + plan.finish_timeout
    return run


def reoffer(defn: WorkflowDef, row: Row, run: dict[str, Any]) -> Offer:
    """An offer for a parked row (its keys were computed when it arrived)."""
    return Offer(
        defn=defn,
        plan=defn.gate,
        ticket=row["ticket"],
        payload=row["payload"],
        keys=json.loads(row["keys"]) if row["keys"] else {},
        priority=int(row["priority"]),
        fair=row["fair_key"],
        identity=row["identity"],
        idempotency_key=row["idempotency_key"],
        run={**run, "id": new_id("run"), "retry_of": row["retry_of"]},
        pending=row,
    )


# -- many arrivals at once -------------------------------------------------------------------


_Run = list[tuple[Offer, float, gate.Slot]]
"""A run of arrivals held by one kind of control: each offer, its time, and the key (or group) it locks."""


async def offer_many(tx: Tx, calls: Sequence[Args]) -> list[Decision]:
    """``offer`` for each of a group commit's calls, in order; arrivals held by one control decided together.

    A run of consecutive arrivals of one kind (``_lone_control``: "slot", a per-key
    concurrency limit; "window", one throttle or rate limit, alone or before a per-key
    concurrency limit; "group", a debounce or a batch) costs a few statements in all: each
    key or group is locked and read once, the arrivals are walked in order as the pipeline's
    stages would decide them, and the parked, dropped or folded ones' rows are written
    together. An admission goes through ``_admit`` and any other offer through ``offer``,
    each once the rows decided before it are written, so ledger ids keep the order of the
    decisions.
    """
    decisions: list[Decision] = []
    locked: set[gate.Slot] = set()  # advisory locks are held until commit: one take per key is enough
    run: _Run = []  # consecutive arrivals held by one kind of control
    kind = ""
    for args, kwargs in calls:
        o, now = _offer_args(args, kwargs)
        lone = _lone_control(o, now)
        if run and (lone is None or lone[0] != kind):
            decisions += await _ARRIVE[kind](tx, run, locked)
            run = []
        if lone is None:
            decisions.append(await offer(tx, o, now))
        else:
            kind = lone[0]
            run.append((o, now, lone[1]))
    if run:
        decisions += await _ARRIVE[kind](tx, run, locked)
    return decisions


def _offer_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Offer, float]:
    bound = {**dict(zip(("o", "now"), args, strict=False)), **kwargs}
    return bound["o"], bound["now"]


def _lone_control(o: Offer, now: float) -> tuple[str, gate.Slot] | None:
    """The kind of run a fresh arrival joins, and the key (or group) it locks, when what can hold it is
    one control (or a window before a slot): ``("slot", slot)``, ``("window", window key)`` or
    ``("group", ("group", group key))``; else ``None`` (``offer`` decides it).

    So: no identity to check, not delayed, no pause on its workflow or its keys in its
    snapshot, and a workflow whose controls are those (``GatePlan.slot_only``,
    ``one_window``, ``debounce_only``, ``batch_only``): every other stage would pass it on
    untouched.
    """
    plan = o.plan
    if o.pending is not None or o.identity is not None or o.pauses is None:
        return None
    if not (plan.slot_only or plan.one_window or plan.debounce_only or plan.batch_only):
        return None
    if o.at is not None and o.at > now:
        return None
    if gate.pause_in(o.pauses, [f"wf:{o.workflow}", *key_pause_scopes(plan, o.keys)], now) is not None:
        return None
    if plan.slot_only:
        return "slot", slot_of(plan, o.keys)
    if plan.debounce_only:
        return "group", ("group", _debounce_group(o)[1])
    if plan.batch_only:
        return "group", ("group", _batch_group(o)[1])
    w = plan.windows[0]
    return "window", (w.scope, o.keys.get(w.name, ""))


async def _lock_keys(tx: Tx, keys: list[gate.Slot], locked: set[gate.Slot]) -> None:
    for key in sorted(keys):  # one order: two processes' bursts never wait on each other in a cycle
        if key not in locked:
            await gate.lock_key(tx, *key)
            locked.add(key)


async def _arrive(tx: Tx, run: _Run, locked: set[gate.Slot]) -> list[Decision]:
    """Decide slot-only arrivals in order, as ``_concurrency`` then ``_admit`` would one after the other."""
    slots = sorted({slot for _, _, slot in run})
    await _lock_keys(tx, slots, locked)
    queues = await gate.slot_queues(tx, slots)  # read after the locks: no other process decides these keys now
    decisions: list[Decision] = []
    parked: list[tuple[Row, Row]] = []
    for o, now, slot in run:
        ahead, used = queues[slot]
        c = o.plan.concurrency
        assert c is not None
        if not ahead and used < c.limit:
            await gate.park_arrivals(tx, parked)
            parked = []
            decision = await _admit(tx, o, now)
            if decision.status == "started":
                queues[slot] = (ahead, used + 1)
        else:
            rows, decision = _slot_parked(o, now, queues, slot)
            parked.append(rows)
        decisions.append(decision)
    await gate.park_arrivals(tx, parked)
    return decisions


def _slot_parked(
    o: Offer, now: float, queues: dict[gate.Slot, tuple[bool, int]], slot: gate.Slot
) -> tuple[tuple[Row, Row], Decision]:
    """``o`` parked for a slot of ``slot``, as ``_concurrency`` parks it (its rows, to write, and its decision);
    ``queues`` then has every later arrival on that key wait behind it."""
    ledger, pending = _arrival_rows(o, now, mode="concurrency", stage="key_pause", due=None, scope=slot[0], key=slot[1])
    queues[slot] = (True, queues[slot][1])
    return (ledger, pending), Decision("queued", o.ticket, pending_id=pending["id"], mode="concurrency", key=slot[1])


async def _arrive_windows(tx: Tx, run: _Run, locked: set[gate.Slot]) -> list[Decision]:
    """Decide one-window arrivals in order, as ``_rate_limit`` or ``_throttle`` (then ``_concurrency``, for a
    windowed slot) then ``_admit`` would one by one."""
    limits: dict[gate.Slot, int] = {}
    for o, _, key in run:
        limits[key] = max(limits.get(key, 0), o.plan.windows[0].limit)
    slotted = sorted({slot_of(o.plan, o.keys) for o, _, _ in run if o.plan.concurrency is not None})
    await _lock_keys(tx, list(limits), locked)  # windows before slots, as one offer takes them
    await _lock_keys(tx, slotted, locked)
    queues = await gate.window_queues(tx, [(*key, limit) for key, limit in sorted(limits.items())])
    slots = await gate.slot_queues(tx, slotted) if slotted else {}
    decisions: list[Decision] = []
    decided: list[tuple[Row, Row | None]] = []  # ledger rows (and pending rows) not written yet
    for o, now, key in run:
        w = o.plan.windows[0]
        queue = queues[key]
        opens = queue.opens(w.limit, now - w.period)
        if w.kind == "rate_limit" and opens is not None:
            retry = max(0.0, opens + w.period - now)
            reason = f"{w.limit} per {w.period:g}s reached; retry after {retry:.3f}s"
            row = _ledger_row(
                o, now, outcome="dropped", control="rate_limit", key=key[1], reason=reason, run_id=None, pending_id=None
            )
            decided.append((row, None))
            decisions.append(Decision("dropped", o.ticket, retry_after=retry, key=key[1]))
            continue
        if w.kind == "throttle" and (opens is not None or queue.ahead):
            due = now if opens is None else opens + w.period  # behind earlier starts, or when a hit leaves
            ledger, pending = _arrival_rows(
                o, now, mode="throttle", stage="throttle", due=due, scope=key[0], key=key[1]
            )
            decided.append((ledger, pending))
            queue.ahead = True  # every later arrival on this key waits behind this one
            decisions.append(
                Decision("queued", o.ticket, pending_id=pending["id"], mode="throttle", due_at=due, key=key[1])
            )
            continue
        if w.kind == "rate_limit":  # a rate limit counts the arrival as it passes; a throttle, the admission
            await gate.add_window_hit(tx, w.scope, key[1], now, w.period)
            queue.hit(now, w.period)
        c = o.plan.concurrency
        slot = slot_of(o.plan, o.keys)
        if c is not None and (slots[slot][0] or slots[slot][1] >= c.limit):
            rows, decision = _slot_parked(o, now, slots, slot)
            decided.append(rows)
            decisions.append(decision)
            continue
        await gate.park_arrivals(tx, decided)
        decided = []
        decision = await _admit(tx, o, now)
        if decision.status == "started" and w.kind == "throttle":  # (in ``_admit``)
            queue.hit(now, w.period)
        if decision.status == "started" and c is not None:
            slots[slot] = (slots[slot][0], slots[slot][1] + 1)
        decisions.append(decision)
    await gate.park_arrivals(tx, decided)
    return decisions


async def _arrive_gathered(tx: Tx, run: _Run, locked: set[gate.Slot]) -> list[Decision]:
    """Decide arrivals gathered into open groups (a debounce, a batch) in order, as ``_debounce`` or ``_batch``
    would one by one: each group locked and read once, folded into in memory and written once (a batch also
    when it fills, and is then offered at once)."""
    groups = sorted({lock for _, _, lock in run})
    await _lock_keys(tx, groups, locked)
    rows: dict[str, Row] = dict(await gate.open_groups(tx, [group for _, group in groups]))
    folded: set[str] = set()  # open groups whose row the folds below changed
    decisions: list[Decision] = []
    decided: list[tuple[Row, Row | None]] = []
    for o, now, (_, group) in run:
        mode = "batch" if o.plan.batch is not None else "debounce"
        opens = _batch_opens(o, now) if mode == "batch" else _debounce_opens(o, now)
        key = opens["key"]
        row = rows.get(group)
        if row is None:
            ledger, pending = _arrival_rows(o, now, **opens)
            # Written at once: the group's later arrivals' ledger rows name it, and its seq is its own ledger row's.
            await gate.park_arrivals(tx, [*decided, (ledger, pending)])
            decided = []
            row = rows[group] = {**gate.PENDING_DEFAULTS, **pending}
            full = o.plan.batch is not None and o.plan.batch.max_size == 1
        else:
            fields, reason, full = _gathered(o, row, now)
            row = rows[group] = {**row, **fields, "folded": int(row["folded"]) + 1, "last_at": now}
            folded.add(group)
            outcome = "batched" if mode == "batch" else "collapsed"
            ledger = _ledger_row(
                o, now, outcome=outcome, control=mode, key=key, reason=reason, run_id=None, pending_id=row["id"]
            )
            decided.append((ledger, None))
            if full:  # written as it stands, then offered
                await gate.park_arrivals(tx, decided)
                decided = []
                await gate.refold_pending(tx, row)
                folded.discard(group)
        if not full:
            decisions.append(
                Decision("queued", o.ticket, pending_id=row["id"], mode=mode, due_at=row["due_at"], key=key)
            )
            continue
        stored = await gate.get_pending(tx, row["id"])
        assert stored is not None
        decisions.append(await _flush_batch(tx, o, stored, now))
        del rows[group]  # offered: the key's next item opens a new batch
    await gate.park_arrivals(tx, decided)
    for group in sorted(folded):
        await gate.refold_pending(tx, rows[group])
    return decisions


def _gathered(o: Offer, row: Row, now: float) -> tuple[dict[str, Any], str, bool]:
    """Folding ``o`` into its open group ``row``: the row's changed fields, the ledger row's reason, and
    whether the group is then full (a batch at its ``max_size``)."""
    b = o.plan.batch
    if b is None:
        return _debounce_fold(o, row, now), _folded_into(row), False
    items, size, reason = _batch_fold(row, o)
    fields = {
        "items": items,
        "identity": None,
        "idempotency_key": None,
        "priority": max(o.priority, int(row["priority"])),
    }
    return fields, reason, size >= b.max_size


_ARRIVE = {"slot": _arrive, "window": _arrive_windows, "group": _arrive_gathered}

with_many(offer, offer_many)
