"""Operator verbs over the gate and over many runs at once (a ``Client`` is built on them)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from ..definitions import WorkflowDef
from ..durations import Duration
from ..engine import flow_waiters
from ..engine.core import Core
from ..errors import InvalidArgument, LockgateError, UnknownWorkflow
from ..flowcontrol import check_limits
from ..gate.pipeline import Decision
from ..inspect import FlowKeyRow, FlowRow, Inspector, RunFilter, Trace
from ..store import Store, flow, gate
from ..store.base import Row, Tx
from ..store.shared import get_run
from ..store.versions import migrate_versions
from ..sweeps.events import FanOut, gate_start
from ..sweeps.replay import ReplayResult, replay_events

__all__ = ["BulkItem", "BulkResult", "OperatorVerbs", "bulk", "check_key_hold", "check_reason", "statuses"]


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


class OperatorVerbs:
    """Pause, flow and trace verbs over a ``Core`` (a ``Client`` is built on them)."""

    def __init__(self, core: Core) -> None:
        self.core = core

    # -- events --------------------------------------------------------------------------

    async def replay_events(
        self, event: str, *, since: datetime, until: datetime, **options: Any
    ) -> list[ReplayResult]:
        """Offer the events ``event`` published in ``[since, until]`` to their triggers again (``sweeps/replay.py``):
        a dry run unless ``commit=True``; ``trigger=[...]``, ``status=[...]``, ``limit=``, ``force=``."""
        core, rt = self.core, self.core.runtime
        deps = FanOut(core.store, core.clock, core.app, gate_start(rt), keyring=rt.keyring)
        picked = {"triggers": options.pop("trigger", None), "statuses": options.pop("status", None)}
        begin, end = since.timestamp(), until.timestamp()
        return await replay_events(deps, event, since=begin, until=end, **picked, **options)

    # -- versions ------------------------------------------------------------------------

    async def migrate_version(
        self,
        run_id: str | None = None,
        *,
        workflow: str | None = None,
        from_version: str | None = None,
        to_version: str,
        commit: bool = False,
        limit: int = 10_000,
    ) -> BulkResult:
        """Declare live runs stamped ``from_version`` safe for the code of ``to_version``: they are restamped, so
        workers whose code runs ``to_version`` claim them. One run (``run_id``; ``from_version`` defaults to its
        own) or a workflow's (``workflow`` and ``from_version``). A dry run unless ``commit``."""
        if (run_id is None) == (workflow is None):
            raise InvalidArgument("migrate-version: give one run id, or a workflow with from_version")
        if not isinstance(to_version, str) or not to_version:
            raise InvalidArgument(f"migrate-version: to_version must be a non-empty string, got {to_version!r}")
        defs = self.core.app.definitions()
        if workflow is not None:
            if defs and workflow not in defs:
                raise UnknownWorkflow(workflow, defs)
            if from_version is None:
                raise InvalidArgument("migrate-version: a workflow needs from_version (its runs' stamp)")
        if run_id is not None:
            row = await self.core.store.read(get_run, run_id)
            if from_version is None:
                from_version = row["version"]
            elif row["version"] != from_version:
                raise InvalidArgument(f"run {run_id} is stamped {row['version']!r}, not {from_version!r}")
        if from_version == to_version:
            raise InvalidArgument(f"migrate-version: the runs are stamped {to_version!r} already")
        now = self.core.clock.now()
        act = self.core.store.write if commit else self.core.store.read  # a dry run writes nothing
        found = await act(
            migrate_versions,
            now,
            from_version,
            to_version,
            workflow=workflow,
            run_id=run_id,
            commit=commit,
            limit=limit + 1,
        )
        outcome = "succeeded" if commit else "would-act"
        items = [BulkItem(r["id"], r["workflow"], r["status"], outcome) for r in found[: limit if not commit else None]]
        if commit and found:
            self.core.runtime.wake(None)  # workers that run to_version may claim them now
        return BulkResult("migrate-version", commit, not commit and len(found) > limit, items)

    # -- pauses --------------------------------------------------------------------------

    async def paused(self, workflow: str) -> bool:
        """Whether ``workflow`` is paused (cached for a second: a pause reaches every process within that)."""
        return await self.core.pauses.paused(workflow)

    async def pause_snapshot(self) -> dict[str, Row]:
        """Active pauses by scope (``wf:<name>``, ``key:<key>``) as this process last read them, at most a
        second ago: the gate decides pauses from this, so a pause reaches every process within a second."""
        return await self.core.pauses.snapshot()

    async def refresh_pauses(self) -> None:
        await self.core.pauses.refresh()

    async def pause(self, workflow: str, reason: str | None = None) -> None:
        """Park every new start of ``workflow`` (nothing is discarded) until ``unpause``."""
        core = self.core
        name = core.app.get(workflow).name if core.app.names else workflow
        await core.pauses.pause(f"wf:{name}", reason, None)

    async def unpause(self, workflow: str) -> int:
        """Lift a pause; the starts it collected are re-offered in priority order. How many were parked."""
        core = self.core
        name = core.app.get(workflow).name if core.app.names else workflow
        now = core.clock.now()
        released = await core.store.write(_unpause, name, now)
        await core.pauses.committed(f"wf:{name}", None)
        core.runtime.wake(None)  # parked starts (the drainer's business) and parked steps
        return released

    async def pause_key(self, key: str, until: datetime | None = None, reason: str | None = None) -> None:
        """Hold admissions competing under flow-control ``key`` (a concurrency/throttle key or pool) until ``until``."""
        check_key_hold(key, until, self.core.clock.now())
        await self.core.pauses.pause(f"key:{key}", reason, None if until is None else until.timestamp())

    async def unpause_key(self, key: str) -> bool:
        """Lift the hold on ``key``; whether it was held (``False``: nothing changed)."""
        core = self.core
        now = core.clock.now()
        was_held = await core.store.write(_unpause_key, key, now)
        await core.pauses.committed(f"key:{key}", None)
        core.runtime.wake(None)  # parked starts (the drainer's business) and parked steps
        return was_held

    # -- step flow control ---------------------------------------------------------------

    async def set_flow_limits(
        self, key: str, *, rate: int | None = None, period: Duration = "1s", parallelism: int | None = None
    ) -> FlowKeyRow:
        """Set step flow-control ``key``'s limits (replacing them whole); waiting steps see them at once.

        Limits set here stand until set again: a declaration that reaches the key later does
        not change them. ``InvalidArgument`` names a bad field; nothing is written then.
        """
        if not isinstance(key, str) or not key.strip():
            raise InvalidArgument("key: must be a non-empty string")
        try:
            checked_rate, seconds, checked_par = check_limits(rate, period, parallelism)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        core = self.core
        handed = await core.store.write(flow.set_key, key, checked_rate, seconds, checked_par, core.clock.now())
        flow_waiters.deliver(core.store, handed)  # steps waiting here for a slot of the key start now
        core.runtime.wake(core.clock.now())  # a woken run is claimable here too
        return (await self.flow_keys(key))[0]

    async def flow_keys(self, key: str | None = None) -> list[FlowKeyRow]:
        """Step flow-control keys: limits in force, running, waiting, started in the window, oldest waiter."""
        return await self.inspector.flow_keys(key)

    async def cancel_start(self, ticket: str, reason: str) -> int:
        """Cancel a start parked at the gate (with every arrival folded into it); how many arrivals it held.

        Raises ``InvalidArgument`` when ``reason`` is empty and ``LockgateError`` when the
        ticket holds no parked start (unknown, already admitted, dropped, ...).
        """
        check_reason(reason, "on the ledger row")
        row = await self.core.store.write(gate.cancel_parked, ticket, reason, self.core.clock.now())
        if row is None:
            state = "unknown ticket"
            with contextlib.suppress(LockgateError):
                state = f"its state is {(await self.trace(ticket)).state}"
            raise LockgateError(f"start {ticket!r} is not parked at the gate ({state})")
        return int(row["folded"])

    async def pauses(self) -> list[dict[str, Any]]:
        """Active pauses: workflows (``wf:``) and keys (``key:``)."""
        return [dict(r) for r in await self.core.store.read(gate.list_pauses, self.core.clock.now())]

    # -- observing ------------------------------------------------------------------------

    async def flow(self, workflow: str | None = None, *, since: datetime | None = None) -> list[FlowRow]:
        """Per workflow and key: queued, oldest waiting, in flight, admitted, collapsed, dropped, ..."""
        return await self.inspector.flow(workflow, since=since)

    async def trace(self, ticket: str) -> Trace:
        """What became of the arrival ``ticket`` (``LockgateError`` for an unknown ticket)."""
        return await self.inspector.trace(ticket)

    @property
    def inspector(self) -> Inspector:
        """The read side over this client's store, definitions and clock (what the surfaces read through)."""
        found = Inspector(self.core.store, self.core.app, self.core.clock, keyring=self.core.keyring)
        found.unroutable_after = self.core.unroutable_after
        return found

    def after_decision(self, defn: WorkflowDef, decision: Decision) -> None:
        """React to a gate decision: wake workers for a new run, stop evicted incumbents."""
        self.core.runtime.after_decision(defn, decision)


def check_reason(reason: str | None, where: str) -> None:
    """Refuse an empty reason for a verb that records it ``where`` (``InvalidArgument``); needs no store."""
    if not reason or not reason.strip():
        raise InvalidArgument(f"the reason must not be empty: it is written {where}")


def check_key_hold(key: str, until: datetime | None, now: float) -> None:
    """Refuse a key hold that cannot be (``InvalidArgument``): an empty key, an ``until`` not in the future."""
    if not key or not key.strip():
        raise InvalidArgument("the key must not be empty")
    if until is not None and until.tzinfo is None:
        raise InvalidArgument("until must be a timezone-aware datetime")
    if until is not None and until.timestamp() <= now:
        raise InvalidArgument(f"until {until.isoformat()} is not in the future")


def statuses(status: str | None, eligible: tuple[str, ...], verb: str) -> tuple[str, ...]:
    """The statuses a bulk ``verb`` looks at: ``status`` (checked), else those it applies to."""
    if status is None:
        return eligible
    RunFilter(statuses=(status,)).check()
    return (status,)


async def bulk(
    store: Store,
    verb: str,
    statuses: tuple[str, ...],
    eligible: tuple[str, ...],
    workflow: str | None,
    limit: int,
    commit: bool,
    act: Callable[[str], Awaitable[Any]],
) -> BulkResult:
    """Act on up to ``limit`` runs in ``statuses`` (a dry run unless ``commit``), each outcome reported."""
    if not isinstance(limit, int) or limit < 1:
        raise InvalidArgument("limit is required and must be >= 1: it is the blast radius")
    rows = await store.read(_candidates, workflow, statuses, limit + 1, verb == "redrive")
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


async def _unpause(tx: Tx, workflow: str, now: float) -> int:
    await gate.unpause(tx, f"wf:{workflow}")
    return await gate.release_paused(tx, workflow, now)


async def _unpause_key(tx: Tx, key: str, now: float) -> bool:
    held = await gate.unpause(tx, f"key:{key}")
    await tx.execute("release_key_pending", {"key": key, "now": now})
    await flow.wake_waiters(tx, [key], now)  # steps waiting under the key as a step flow-control key
    return held
