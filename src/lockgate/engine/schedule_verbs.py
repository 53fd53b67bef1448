"""Schedules created, changed and deleted at runtime (``client.schedules`` delegates here).

A runtime schedule is a row like a declared one, with its options as JSON and
``origin = 'runtime'``; it fires through the same sweep, claim, gate and firing ledger.
Each verb is one short write through the group commit (or, with ``conn=``, inside the
caller's transaction). Nothing is written when the options are wrong.

An update that moves the slots (cron, every, timezone, jitter, start_at, end_at) first fires,
once, the slots the old rule had due and the sweep had not reached yet (their claim rows make
a second firing impossible), then starts the new rule's slots strictly after the update: no
slot due under the old rule is skipped, none fires twice, and no slot of the new rule that lies
before the update fires.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ..errors import InvalidSchedule, ScheduleExists, ScheduleNotOwned, UnknownSchedule
from ..schedule import ScheduleDef
from ..schedule_options import RULE_OPTIONS, IfExists, build_runtime, check_id, from_row, options_json, stored_options
from ..store import schedules as sched_ops
from ..store.base import Row, Tx
from .firing import ScheduleRuntime
from .schedule_due import fire_schedule
from .schedules import register_declared

__all__ = ["Created", "create", "delete", "update"]

Created = Literal["created", "updated", "unchanged", "existing"]

UPDATE_TRIES = 5


async def create(
    rt: ScheduleRuntime,
    schedule_id: str,
    workflow: str,
    options: Mapping[str, Any],
    *,
    paused: bool = False,
    if_exists: IfExists = "error",
    conn: Any = None,
) -> tuple[Created, Row]:
    """Create runtime schedule ``schedule_id``; what happened (``if_exists`` says what an existing id does),
    and the row as written (for ``created``: readable before a joined ``conn`` commits)."""
    schedule_id = check_id(schedule_id)
    if if_exists not in ("error", "update", "skip"):
        raise InvalidSchedule(schedule_id, "if_exists", f"must be 'error', 'update' or 'skip', got {if_exists!r}")
    if not isinstance(paused, bool):
        raise InvalidSchedule(schedule_id, "paused", f"must be True or False, got {paused!r}")
    now = rt.clock.now()
    defn, note = _validated(rt, schedule_id, workflow, options, now)
    await register_declared(rt, schedule_id)  # an id this code declares is taken, stored or not yet
    row = _row(defn, note, now, now, paused=paused)
    row.update(paused=int(paused), paused_at=now if paused else None)

    async def op(tx: Tx) -> Row | None:
        if await sched_ops.create_schedule(tx, row):
            return None
        existing = await sched_ops.schedule_state(tx, schedule_id)
        if existing is None:  # deleted between the two statements: try once more
            return None if await sched_ops.create_schedule(tx, row) else await sched_ops.schedule_state(tx, schedule_id)
        if if_exists == "error":
            raise ScheduleExists(schedule_id, str(existing["origin"]))
        if if_exists == "update" and existing["origin"] != "runtime":
            raise ScheduleNotOwned(schedule_id, "update")
        return existing

    if conn is not None:
        async with rt.store.join(conn) as joined:
            existing = await op(joined.tx)
    else:
        existing = await rt.store.write(op)
    if existing is None:
        written = {**row, "origin": "runtime", "revision": 1, "missed": 0, "orphaned_at": None}
        return "created", {**written, "paused_reason": None, "created_at": now, "updated_at": now}
    if if_exists == "skip":
        return "existing", existing
    done, replaced = await _replace(rt, schedule_id, lambda _old: (workflow, dict(options)), conn=conn)
    return done, existing if replaced is None else replaced


async def update(
    rt: ScheduleRuntime, schedule_id: str, changes: Mapping[str, Any], *, conn: Any = None
) -> tuple[Created, Row | None]:
    """Change the given options of runtime schedule ``schedule_id`` (the others stay as they are); what
    happened, and with ``conn=`` the row as written in the caller's transaction (``None`` without).
    With ``conn=``, the old rule's slots due by now (a moved rule) are fired at once, outside that
    transaction: they were due whether or not it commits."""
    schedule_id = check_id(schedule_id)
    await register_declared(rt, schedule_id)
    changes = dict(changes)
    workflow = changes.pop("workflow", None)

    def merged(old: Row) -> tuple[str, dict[str, Any]]:
        options = stored_options(old)
        if "cron" in changes or "every" in changes:  # one rule replaces the other
            options.pop("cron", None)
            options.pop("every", None)
        options.update(changes)
        return (workflow if workflow is not None else str(old["workflow"])), options

    return await _replace(rt, schedule_id, merged, conn=conn)


async def delete(rt: ScheduleRuntime, schedule_id: str, *, conn: Any = None) -> None:
    """Delete runtime schedule ``schedule_id``: no slot of it fires any more. A run it started goes on;
    its firing is recorded when the run ends. Buffered firings are skipped."""
    schedule_id = check_id(schedule_id)
    await register_declared(rt, schedule_id)

    async def op(tx: Tx) -> None:
        existing = await sched_ops.lock_schedule(tx, schedule_id)
        if existing is None:
            raise UnknownSchedule(schedule_id)
        if existing["origin"] != "runtime":
            raise ScheduleNotOwned(schedule_id, "delete")
        await sched_ops.delete_schedule(tx, schedule_id, rt.clock.now())

    if conn is not None:
        async with rt.store.join(conn) as joined:
            await op(joined.tx)
    else:
        await rt.store.write(op)


async def runtime_row(rt: ScheduleRuntime, schedule_id: str, verb: str) -> Row:
    """The row of runtime schedule ``schedule_id``: ``UnknownSchedule`` or ``ScheduleNotOwned`` otherwise."""
    row = await rt.store.read(sched_ops.schedule_state, schedule_id)
    if row is None:
        raise UnknownSchedule(schedule_id)
    if row["origin"] != "runtime":
        raise ScheduleNotOwned(schedule_id, verb)
    return row


async def _replace(
    rt: ScheduleRuntime, schedule_id: str, new_options: Any, *, conn: Any = None
) -> tuple[Created, Row | None]:
    """Write the options ``new_options(old_row)`` gives, retrying if another writer changed the row meanwhile;
    with ``conn=``, also the row as the caller's transaction now holds it."""
    for _ in range(UPDATE_TRIES):
        old = await runtime_row(rt, schedule_id, "update")
        workflow, options = new_options(old)
        now = rt.clock.now()
        defn, note = _validated(rt, schedule_id, workflow, options, now)
        before, _ = from_row(old)
        fresh = options_json(defn, note)
        if fresh == old["definition"] and workflow == old["workflow"] and defn.timezone == old["timezone"]:
            return "unchanged", None
        moved = _rule(before) != _rule(defn)
        state = old
        if moved and not old["paused"]:
            # The old rule's slots due by now fire first (once: their claims say so), then the new rule starts.
            await fire_schedule(rt, before, old, now)
            state = await runtime_row(rt, schedule_id, "update")
        watermark = float(state["watermark"]) if state["watermark"] is not None else now
        if moved:
            watermark = max(watermark, now)
        row = _row(defn, note, now, watermark, paused=bool(state["paused"]))
        revision = int(state["revision"])
        written = None
        if conn is not None:
            async with rt.store.join(conn) as joined:
                done = await sched_ops.replace_schedule(joined.tx, row, revision)
                if done:
                    written = await sched_ops.schedule_state(joined.tx, schedule_id)
        else:
            done = await rt.store.write(sched_ops.replace_schedule, row, revision)
        if done:
            return "updated", written
    raise InvalidSchedule(schedule_id, "id", f"changed by others {UPDATE_TRIES} times during this update; try again")


def _rule(defn: ScheduleDef) -> tuple[Any, ...]:
    return tuple(getattr(defn, name) for name in sorted(RULE_OPTIONS))


def _validated(
    rt: ScheduleRuntime, schedule_id: str, workflow: Any, options: Mapping[str, Any], now: float
) -> tuple[ScheduleDef, str | None]:
    if not isinstance(workflow, str) or not workflow:
        raise InvalidSchedule(schedule_id, "workflow", f"must name a workflow, got {workflow!r}")
    defs = rt.runtime.app.definitions()
    defn = defs.get(workflow)
    if defn is None:
        known = ", ".join(sorted(defs)[:20]) or "(none)"
        raise InvalidSchedule(schedule_id, "workflow", f"no workflow {workflow!r} is registered (known: {known})")
    return build_runtime(schedule_id, workflow, options, defn.payload_model, now)


def _row(defn: ScheduleDef, note: str | None, now: float, watermark: float, *, paused: bool) -> dict[str, Any]:
    """The columns of a runtime schedule's row."""
    return {
        "name": defn.name,
        "workflow": defn.workflow,
        "spec": defn.spec,
        "timezone": defn.timezone,
        "definition": options_json(defn, note),
        "watermark": watermark,
        "next_at": None if paused else defn.next_due(watermark),
        "now": now,
    }
