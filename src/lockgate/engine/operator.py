"""Operator verbs over the gate and over many runs at once (mixed into ``Client``)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..app import App
from ..clock import Clock
from ..definitions import WorkflowDef
from ..errors import InvalidArgument, LockgateError
from ..gate.ledger import FlowRow, Trace, flow, trace
from ..gate.pipeline import Decision
from ..store import Store, gate
from ..store.base import Row, Tx

if TYPE_CHECKING:
    from .admissions import Admissions

__all__ = ["BulkItem", "BulkResult", "OperatorMixin"]

PAUSE_CACHE_SECONDS = 1.0


@dataclass(frozen=True)
class BulkItem:
    run_id: str
    workflow: str
    status: str
    outcome: str  # succeeded | failed | skipped | would-act (dry run)
    reason: str | None = None


@dataclass(frozen=True)
class BulkResult:
    """Per-run outcome of a bulk verb; ``truncated`` says more runs matched than ``limit``."""

    verb: str
    committed: bool
    truncated: bool
    items: list[BulkItem] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for i in self.items if i.outcome == outcome)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verb": self.verb,
            "committed": self.committed,
            "truncated": self.truncated,
            "items": [asdict(i) for i in self.items],
            "counts": {o: self.count(o) for o in ("succeeded", "failed", "skipped", "would-act")},
        }


class OperatorMixin:
    """Pause, flow, trace and bulk verbs (``Client`` provides the store, clock, app and run verbs)."""

    app: App
    store: Store
    clock: Clock
    _paused_cache: dict[str, Row]
    _paused_read_at: float
    _pause_reads: int  # reads of the pauses begun so far
    _pause_read_kept: int  # the latest begun of those whose answer is the cache
    _admissions: Admissions

    def wake(self, at: float | None = None) -> None:
        raise NotImplementedError

    def stopped(self, run_ids: list[str], reason: str) -> None:
        raise NotImplementedError

    async def cancel(self, run_id: str, reason: str | None = None) -> None:
        raise NotImplementedError

    async def redrive(self, run_id: str) -> None:
        raise NotImplementedError

    async def retry(self, run_id: str, payload_override: Any = None) -> Any:
        raise NotImplementedError

    # -- pauses --------------------------------------------------------------------------

    async def paused(self, workflow: str) -> bool:
        """Whether ``workflow`` is paused (cached for a second: a pause reaches every process within that)."""
        return gate.pause_in(await self.pause_snapshot(), [f"wf:{workflow}"], self.clock.now()) is not None

    async def pause_snapshot(self) -> dict[str, Row]:
        """Active pauses by scope (``wf:<name>``, ``key:<key>``) as this process last read them, at most a
        second ago: the gate decides pauses from this, so a pause reaches every process within a second."""
        if self.clock.now() - self._paused_read_at > PAUSE_CACHE_SECONDS:
            await self.refresh_pauses()
        return self._paused_cache

    async def refresh_pauses(self) -> None:
        now = self.clock.now()
        self._pause_reads += 1
        mine = self._pause_reads
        rows = await self.store.read(gate.list_pauses, now)
        if mine < self._pause_read_kept:
            return  # a read begun after this one has answered already: this one may be older
        self._paused_cache = {r["scope"]: r for r in rows}
        self._paused_read_at = now
        self._pause_read_kept = mine

    async def _paused_here(self, scope: str, row: Row | None) -> None:
        """This process just committed a pause of ``scope`` (``row``) or its lifting (``None``): its own
        gate sees it at once, and no read begun before the commit may undo that; then a fresh read."""
        cache = dict(self._paused_cache)
        if row is None:
            cache.pop(scope, None)
        else:
            cache[scope] = row
        self._pause_reads += 1
        self._pause_read_kept = self._pause_reads
        self._paused_cache = cache
        await self.refresh_pauses()

    async def pause(self, workflow: str, reason: str | None = None) -> None:
        """Park every new start of ``workflow`` (nothing is discarded) until ``unpause``."""
        name = self.app.get(workflow).name if self.app.names else workflow
        now = self.clock.now()
        await self.store.write(gate.pause, f"wf:{name}", reason, None, now)
        await self._paused_here(f"wf:{name}", _pause_row(f"wf:{name}", reason, None, now))

    async def unpause(self, workflow: str) -> int:
        """Lift a pause; the starts it collected are re-offered in priority order. How many were parked."""
        name = self.app.get(workflow).name if self.app.names else workflow
        now = self.clock.now()
        released = await self.store.write(_unpause, name, now)
        await self._paused_here(f"wf:{name}", None)
        self.wake()  # parked starts: the drainer's business too
        return released

    async def pause_key(self, key: str, until: datetime | None = None, reason: str | None = None) -> None:
        """Hold admissions competing under flow-control ``key`` (a concurrency/throttle key or pool) until ``until``."""
        if not key:
            raise InvalidArgument("pause_key needs a non-empty key")
        if until is not None and until.tzinfo is None:
            raise InvalidArgument("until must be a timezone-aware datetime")
        now = self.clock.now()
        ends = None if until is None else until.timestamp()
        await self.store.write(gate.pause, f"key:{key}", reason, ends, now)
        await self._paused_here(f"key:{key}", _pause_row(f"key:{key}", reason, ends, now))

    async def unpause_key(self, key: str) -> None:
        now = self.clock.now()
        await self.store.write(_unpause_key, key, now)
        await self._paused_here(f"key:{key}", None)
        self.wake()  # parked starts: the drainer's business too

    async def cancel_start(self, ticket: str, reason: str) -> int:
        """Cancel a start parked at the gate (with every arrival folded into it); how many arrivals it held.

        Raises ``InvalidArgument`` when ``reason`` is empty and ``LockgateError`` when the
        ticket holds no parked start (unknown, already admitted, dropped, ...).
        """
        if not reason:
            raise InvalidArgument("cancel_start needs a reason: it is written on the ledger row")
        row = await self.store.write(gate.cancel_parked, ticket, reason, self.clock.now())
        if row is None:
            state = "unknown ticket"
            with contextlib.suppress(LockgateError):
                state = f"its state is {(await self.trace(ticket)).state}"
            raise LockgateError(f"start {ticket!r} is not parked at the gate ({state})")
        return int(row["folded"])

    async def pauses(self) -> list[dict[str, Any]]:
        """Active pauses: workflows (``wf:``) and keys (``key:``)."""
        return [dict(r) for r in await self.store.read(gate.list_pauses, self.clock.now())]

    # -- observing ------------------------------------------------------------------------

    async def flow(self, workflow: str | None = None, *, since: datetime | None = None) -> list[FlowRow]:
        """Per workflow and key: queued, oldest waiting, in flight, admitted, collapsed, dropped, ..."""
        return await self.store.read(
            flow, self.clock.now(), workflow=workflow, since=None if since is None else since.timestamp()
        )

    async def trace(self, ticket: str) -> Trace:
        """What became of the arrival ``ticket`` (``LockgateError`` for an unknown ticket)."""
        limits = {
            d.gate.concurrency_scope: d.gate.concurrency.limit
            for d in self.app.definitions().values()
            if d.gate is not None and d.gate.concurrency is not None
        }
        found = await self.store.read(trace, ticket, self.clock.now(), limits)
        if found is None:
            raise LockgateError(f"no arrival with ticket {ticket!r}")
        return found

    def after_decision(self, defn: WorkflowDef, decision: Decision) -> None:
        """React to a gate decision: wake workers for a new run, stop evicted incumbents."""
        if decision.stopped:
            self.stopped(decision.stopped, "singleton eviction")
        if decision.status == "started":
            self.wake()
        if decision.status != "queued":
            self._admissions.poke()  # a parked start may be what was just decided

    # -- bulk -----------------------------------------------------------------------------

    async def cancel_many(
        self, *, reason: str, limit: int, workflow: str | None = None, status: str | None = None, commit: bool = False
    ) -> BulkResult:
        """Cancel up to ``limit`` running/suspended runs (a dry run unless ``commit``)."""
        if not reason:
            raise InvalidArgument("cancel_many needs a reason: it lands on every run's run-cancelled event")
        eligible = ("running", "suspended")
        statuses = _statuses(status, eligible, "cancel")
        return await _bulk(
            self, "cancel", statuses, eligible, workflow, limit, commit, lambda run_id: self.cancel(run_id, reason)
        )

    async def replay_many(
        self, *, mode: str, limit: int, workflow: str | None = None, status: str | None = None, commit: bool = False
    ) -> BulkResult:
        """Redrive (failed) or retry (failed, cancelled) up to ``limit`` runs (a dry run unless ``commit``)."""
        if mode not in ("redrive", "retry"):
            raise InvalidArgument("mode is required: 'redrive' (failed runs) or 'retry' (failed or cancelled runs)")
        eligible = ("failed",) if mode == "redrive" else ("failed", "cancelled")
        statuses = _statuses(status, eligible, mode)

        async def act(run_id: str) -> None:
            if mode == "redrive":
                await self.redrive(run_id)
            else:
                await self.retry(run_id)

        return await _bulk(self, mode, statuses, eligible, workflow, limit, commit, act)


def _statuses(status: str | None, eligible: tuple[str, ...], verb: str) -> tuple[str, ...]:
    if status is None:
        return eligible
    known = ("running", "suspended", "succeeded", "failed", "cancelled")
    if status not in known:
        raise InvalidArgument(f"unknown status {status!r}: {', '.join(known)}")
    return (status,)


async def _bulk(
    client: OperatorMixin,
    verb: str,
    statuses: tuple[str, ...],
    eligible: tuple[str, ...],
    workflow: str | None,
    limit: int,
    commit: bool,
    act: Any,
) -> BulkResult:
    if not isinstance(limit, int) or limit < 1:
        raise InvalidArgument("limit is required and must be >= 1: it is the blast radius")
    rows = await client.store.read(_candidates, workflow, statuses, limit + 1, verb == "redrive")
    truncated = len(rows) > limit
    items: list[BulkItem] = []
    for row in rows[:limit]:
        base = {"run_id": row["id"], "workflow": row["workflow"], "status": row["status"]}
        if row["status"] not in eligible:
            items.append(BulkItem(**base, outcome="skipped", reason=f"{verb} does not apply to a {row['status']} run"))
            continue
        if not commit:
            items.append(BulkItem(**base, outcome="would-act"))
            continue
        try:
            await act(row["id"])
        except LockgateError as exc:
            items.append(BulkItem(**base, outcome="failed", reason=str(exc)))
        else:
            items.append(BulkItem(**base, outcome="succeeded"))
    return BulkResult(verb=verb, committed=commit, truncated=truncated, items=items)


async def _candidates(
    tx: Tx, workflow: str | None, statuses: tuple[str, ...], limit: int, exclude_discarded: bool
) -> list[Row]:
    return await tx.execute(
        "bulk_candidates",
        {
            "workflow": workflow,
            "statuses": json.dumps(list(statuses)),
            "limit": limit,
            "include_discarded": 0 if exclude_discarded else 1,
        },
    )


def _pause_row(scope: str, reason: str | None, until: float | None, now: float) -> Row:
    """The row ``gate.pause`` writes (``lockgate_pauses``)."""
    return {"scope": scope, "reason": reason, "until": until, "created_at": now}


async def _unpause(tx: Tx, workflow: str, now: float) -> int:
    await gate.unpause(tx, f"wf:{workflow}")
    return await gate.release_paused(tx, workflow, now)


async def _unpause_key(tx: Tx, key: str, now: float) -> None:
    await gate.unpause(tx, f"key:{key}")
    await tx.execute("release_key_pending", {"key": key, "now": now})
