"""Store operations on run rows: create, read, claim, park, finish, and the operator's transitions.

Claims live here: claiming a run, releasing it and reading when the next one wakes change
and read the run's own row (its owner, epoch, lease); a worker's side of a lease (its
heartbeat, the renewal of every lease it holds) is in ``workers``. Writes that act for a
held run carry a ``Fence``: if the lease moved on, the write changes nothing and raises
``Fenced``. Ending a run writes its held journal entries and frees its slot, so this module
uses ``journal`` and ``gate``; neither of them, nor any other subject module, uses it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..errors import RunNotEligible, UnknownRun
from ..serde import dump_json
from . import gate, journal, shared
from .base import Row, Tx
from .coalesce import with_many
from .journal import Entry
from .shared import LIVE, TERMINAL, Fence, Fenced, add_event, event_row, get_run, run_params, started_data

__all__ = [
    "adopt_child",
    "cancel_run",
    "claim_runs",
    "claim_runs_waking",
    "claimed_row",
    "count_runs",
    "create_run",
    "create_runs",
    "created_row",
    "discard_run",
    "end_run",
    "ended_rows",
    "ends_plainly",
    "error_data",
    "find_run",
    "finish_collecting",
    "finish_run",
    "fold_run_counts",
    "get_runs",
    "last_successes",
    "list_runs",
    "mark_stalled",
    "next_wake",
    "park_run",
    "redrive_run",
    "release_run",
    "request_cancel",
    "resume_from_step",
    "resume_run",
    "runs_before",
    "stale_candidates",
    "suspend_run",
    "without_entries",
]


def _started_event(params: dict[str, Any]) -> dict[str, Any]:
    data = started_data(params["workflow"], params["ticket"], params["parent_id"])
    return {"run_id": params["id"], "type": "run-started", "at": params["now"], "data": data}


def created_row(params: dict[str, Any]) -> Row:
    """The row of a run just inserted with ``params``, as the insert wrote it (nothing read back)."""
    return {**params, "status": "running", "created_at": params["now"]}


def claimed_row(run: dict[str, Any], owner: str, lease_until: float, now: float) -> Row:
    """The row of ``run`` as created claimed by ``owner`` at ``now`` (what executing it reads), unread."""
    claim = {"owner": owner, "lease_until": lease_until, "epoch": 1, "entered_at": now, "entries": 1}
    return {**created_row(run_params({**run, **claim}, now)), "reclaim_count": 0, "updated_at": now, "progress_at": now}


async def create_run(tx: Tx, run: dict[str, Any], now: float) -> tuple[Row, bool]:
    """Insert ``run`` unless its identity is spent; ``(row, created)``.

    A created run comes back as the columns it was inserted with (``RETURNING *`` costs
    SQLite several times the insert itself); an existing one as stored.
    """
    params = run_params(run, now)
    if await tx.execute("insert_run", params):
        await tx.execute("insert_event", _started_event(params))
        return created_row(params), True
    return await shared.run_by_identity(tx, params["identity"]), False


async def create_runs(tx: Tx, runs: list[tuple[dict[str, Any], float]]) -> list[tuple[Row, bool]]:
    """``create_run`` for each ``(run, now)`` in order, with one multi-row insert per table."""
    params = [run_params(run, now) for run, now in runs]
    inserted = {r["id"] for r in await tx.execute_values("insert_run", params)}
    await tx.execute_values("insert_event", [_started_event(p) for p in params if p["id"] in inserted])
    out: list[tuple[Row, bool]] = []
    for p in params:
        if p["id"] in inserted:
            out.append((created_row(p), True))
            continue
        out.append((await shared.run_by_identity(tx, p["identity"]), False))
    return out


async def get_runs(tx: Tx, run_ids: list[str]) -> dict[str, Row]:
    """The rows of those of ``run_ids`` that exist, by id (one query for any number)."""
    return {row["id"]: row for row in await tx.execute("get_runs", {"ids": json.dumps(run_ids)})}


async def find_run(tx: Tx, run_id: str) -> Row | None:
    return await tx.one("get_run", {"id": run_id})


async def ended_rows(tx: Tx, run_ids: list[str]) -> list[Row]:
    """The final rows of those of ``run_ids`` that have ended (one query for any number of awaited runs)."""
    return await tx.execute("ended_rows", {"ids": json.dumps(run_ids)})


async def list_runs(
    tx: Tx,
    *,
    workflow: str | None = None,
    status: str | None = None,
    parent_id: str | None = None,
    source: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[Row]:
    params = {"workflow": workflow, "status": status, "parent_id": parent_id, "source": source}
    return await tx.execute("list_runs", {**params, "limit": limit, "offset": offset})


async def last_successes(tx: Tx) -> dict[str, float]:
    """When each workflow's newest succeeded run (of those kept) finished, by workflow."""
    return {r["workflow"]: float(r["at"]) for r in await tx.execute("last_successes") if r["at"] is not None}


async def fold_run_counts(tx: Tx) -> int:
    """Fold the run count changes the trigger appended (PostgreSQL, migration 0040) into the counts; how many
    workflow and status pairs changed. Nothing on SQLite, which counts at each read."""
    return len(await tx.execute("fold_run_counts"))


async def count_runs(tx: Tx, workflow: str | None = None) -> tuple[list[Row], list[Row]]:
    """Runs per workflow and status (``workflow, status, n``) and parked starts per workflow and mode
    (``workflow, mode, n``), read in one transaction so the two agree."""
    runs = [r for r in await tx.execute("count_runs_by_status") if workflow is None or r["workflow"] == workflow]
    parked: dict[tuple[str, str], int] = {}
    for r in await tx.execute("flow_pending", {"workflow": workflow}):
        parked[(r["workflow"], r["mode"])] = parked.get((r["workflow"], r["mode"]), 0) + int(r["queued"])
    return runs, [{"workflow": wf, "mode": mode, "n": n} for (wf, mode), n in sorted(parked.items())]


async def claim_runs(
    tx: Tx, owner: str, now: float, lease_until: float, limit: int, keys: str | Sequence[str], patches: str = "{}"
) -> list[Row]:
    """Claim up to ``limit`` due runs for ``owner``: those ``keys`` and ``patches`` (``routing.claim_filter``,
    as JSON) say its code runs, in wake order. ``keys`` as a list of workflow names: their unversioned,
    unpatched runs."""
    return (await claim_runs_waking(tx, owner, now, lease_until, limit, keys, patches, wake=False))[0]


async def claim_runs_waking(
    tx: Tx,
    owner: str,
    now: float,
    lease_until: float,
    limit: int,
    keys: str | Sequence[str],
    patches: str = "{}",
    *,
    wake: bool = True,
) -> tuple[list[Row], float | None]:
    """``claim_runs``, and ``next_wake`` for ``owner`` read in the same round trip after it (with ``wake``)."""
    if not isinstance(keys, str):
        keys = json.dumps([f"{name}\x1f" for name in keys])
    params = {"owner": owner, "now": now, "lease_until": lease_until, "limit": limit, "keys": keys, "patches": patches}
    if not wake:
        return await tx.execute("claim_runs", params), None
    claimed, due = await tx.execute_all([("claim_runs", params), ("next_wake", {"owner": owner})])
    return claimed, None if not due or due[0]["at"] is None else float(due[0]["at"])


async def next_wake(tx: Tx, owner: str | None = None) -> float | None:
    """When the next run becomes claimable; ``owner``'s own leases never count (it is alive)."""
    value = await tx.scalar("next_wake", {"owner": owner})
    return None if value is None else float(value)


async def release_run(tx: Tx, fence: Fence, retry_at: float) -> None:
    """Let go of a held run after a local failure; any worker may take it again at ``retry_at``.

    Its entry stays marked unfinished, so failures that repeat count toward the crash loop.
    """
    await tx.execute("release_run", {**fence.params(), "wake_at": retry_at})


async def park_run(
    tx: Tx,
    fence: Fence,
    now: float,
    *,
    wake_at: float | None,
    waiting_on: str,
    names: list[str],
    children: list[str],
    models: dict[str, str] | None = None,
    entries: Sequence[Entry] = (),
    give_back: bool = False,
    hooks: Sequence[Callable[[Tx, float], Awaitable[bool]]] = (),
    events: Sequence[dict[str, Any]] = (),
) -> float | None:
    """Release a held run until ``wake_at`` or a message/child it waits for; the wake time set.

    ``entries``: journal entries held back for this write, written first. ``give_back``: the
    run frees its concurrency slot while it waits (a parent waiting on a child), and says so
    in ``waiting_for`` (``"slot": true``), so that it takes a slot again before it goes on.
    ``hooks``: run here, each says whether what it waits for came meanwhile (an event wait); ``events``:
    the event waits, each ``{"event": name, "match": ...}``, kept in ``waiting_for`` to be shown.
    """
    await journal.record_entries(tx, fence, entries)
    for hook in hooks:
        if await hook(tx, now):
            wake_at = now
    if give_back:
        await gate.free_slot(tx, fence.run_id)
    waiting_for = None
    if names or children or give_back or events:
        waits: dict[str, Any] = {"names": names, "children": children, "models": models or {}}
        if events:
            waits["events"] = list(events)
        waiting_for = dump_json({**waits, "slot": True} if give_back else waits)
    parked = await tx.execute(
        "park_run",
        {**fence.params(), "now": now, "wake_at": wake_at, "waiting_on": waiting_on, "waiting_for": waiting_for},
    )
    if not parked:
        raise Fenced()
    wake_at = wake_at if parked[0]["wake_at"] is None else float(parked[0]["wake_at"])
    if names or children:  # after the park: a child's end that held this row meanwhile is seen (lock_parent)
        hit = await tx.one(
            "pending_for_waits", {"run_id": fence.run_id, "names": json.dumps(names), "children": json.dumps(children)}
        )
        if hit is not None and (wake_at is None or wake_at > now):
            await tx.execute("wake_run", {"run_id": fence.run_id, "now": now, "waiting_on": waiting_on})
            wake_at = now
    return wake_at


async def finish_run(
    tx: Tx,
    fence: Fence,
    now: float,
    *,
    status: str,
    output: str | None = None,
    error_tag: str | None = None,
    error_message: str | None = None,
    event: dict[str, Any] | None = None,
    plain: bool = True,
    entries: Sequence[Entry] = (),
) -> list[str]:
    """End a held run; returns the ids of children closed with it (to stop locally).

    ``plain=False`` when the caller knows the end asks more (see ``ends_plainly``): the
    plain attempt, which would change no row, is skipped. ``entries``: journal entries
    held back for this write, written first.
    """
    events: list[dict[str, Any]] = []
    stopped, _ = await finish_collecting(
        tx,
        fence,
        now,
        events,
        status=status,
        output=output,
        error_tag=error_tag,
        error_message=error_message,
        event=event,
        plain=plain,
        entries=entries,
    )
    await tx.execute_values("insert_event", events)
    return stopped


async def _finish_many(tx: Tx, calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[list[str]]:
    """``finish_run`` for the runs one group commit ends: their held entries in one statement, their end
    events in one multi-row insert."""
    events: list[dict[str, Any]] = []
    await journal.record_held(tx, [(fence, given.get("entries", ())) for (fence, _), given in calls])
    out = [
        (await finish_collecting(tx, fence, now, events, **without_entries(given)))[0] for (fence, now), given in calls
    ]
    await tx.execute_values("insert_event", events)
    return out


def without_entries(given: dict[str, Any]) -> dict[str, Any]:
    """A call's keyword arguments but its held entries (a many-at-once form wrote them already)."""
    return {k: v for k, v in given.items() if k != "entries"}


async def finish_collecting(
    tx: Tx,
    fence: Fence,
    now: float,
    events: list[dict[str, Any]],
    *,
    status: str,
    output: str | None = None,
    error_tag: str | None = None,
    error_message: str | None = None,
    event: dict[str, Any] | None = None,
    plain: bool = True,
    entries: Sequence[Entry] = (),
    slotted: bool = False,
) -> tuple[list[str], bool]:
    """``finish_run``, but a plain end's event is added to ``events`` for the caller to write with others'.

    Returns the children closed with the run and whether it ended plainly (one statement;
    ``slotted``: freeing its slot is left to the caller, see ``gate/handoff.py``).
    """
    await journal.record_entries(tx, fence, entries)
    params = {
        **fence.params(),
        "now": now,
        "status": status,
        "output": output,
        "error_tag": error_tag,
        "error_message": error_message,
    }
    data = event or error_data(error_tag, error_message)
    # one statement per run: a multi-row form costs the server more to plan than these cost to run
    if plain and await tx.expect("finish_run_plain", {**params, "slotted": slotted}):  # the common end
        events.append(event_row(fence.run_id, f"run-{status}", now, data))
        return [], True
    await tx.execute("lock_parent", {"run_id": fence.run_id})  # a child: its parent's row first (see the query)
    rows = await tx.execute("finish_run", params)
    if not rows:
        raise Fenced()
    await add_event(tx, fence.run_id, f"run-{status}", now, data)
    if status in TERMINAL:
        return await _closed(tx, rows[0], now, status, error_tag, error_message), False
    return [], False


def ends_plainly(row: Row, status: str, *, started_children: bool) -> bool:
    """Whether ending the claimed ``row`` with ``status`` asks nothing more (``finish_run_plain``'s terms).

    No slot to free, no parent to wake, no failure report, and no child started (one that
    is still open would be closed with it). A wrong guess costs time, not correctness: a
    plain attempt that changes no row goes the full way.
    """
    return (
        row.get("slot_scope") is None
        and row.get("parent_id") is None
        and not (status == "failed" and row.get("on_failure"))
        and not started_children
    )


def error_data(error_tag: str | None, error_message: str | None) -> dict[str, Any] | None:
    """A run end's event data for an error (``None`` without one)."""
    if error_tag is None and error_message is None:
        return None
    return {"error_tag": error_tag, "error_message": error_message}


async def _closed(
    tx: Tx, row: Row, now: float, status: str, error_tag: str | None, error_message: str | None
) -> list[str]:
    """A run reached a terminal status: free its slot, report a failure, wake its parent, close its children."""
    run_id, parent_id = row["id"], row["parent_id"]
    if row["slot_scope"] is not None:
        await gate.free_slot(tx, run_id)
    if status == "failed" and row["on_failure"]:
        reason = "finish-timeout" if error_tag == "FinishTimeout" else "failed"
        report = {
            "workflow": row["workflow"],
            "payload": json.loads(row["payload"]),
            "error_tag": error_tag,
            "error_message": error_message,
            "run_id": run_id,
            "reason": reason,
            "failed_at": now,
        }
        await gate.enqueue_failure_report(tx, row["on_failure"], report, now)
    if parent_id is not None:
        await tx.execute("wake_run", {"run_id": parent_id, "now": now, "waiting_on": "child"})
    if not row["open_children"]:  # told by the statement that ended the run: no query for the common case
        return []
    stopped: list[str] = []
    for child in await tx.execute("open_children", {"parent_id": run_id}):
        policy = child["parent_close"] or "cancel"
        if policy == "abandon":
            continue
        tag = "Terminated" if policy == "terminate" else "Cancelled"
        stopped += await end_run(
            tx,
            child["id"],
            None,
            now,
            status="cancelled",
            error_tag=tag,
            error_message=f"parent {run_id} closed ({policy})",
            event={"reason": "parent-closed", "policy": policy, "parent_id": run_id},
        )
    return stopped


async def end_run(
    tx: Tx,
    run_id: str,
    from_status: str | None,
    now: float,
    *,
    status: str,
    error_tag: str | None,
    error_message: str | None,
    event: dict[str, Any],
) -> list[str]:
    row = await get_run(tx, run_id)
    source = from_status or row["status"]
    changed = await tx.execute(
        "set_status",
        {
            "run_id": run_id,
            "from_status": source,
            "status": status,
            "error_tag": error_tag,
            "error_message": error_message,
            "wake_at": None,
            "now": now,
        },
    )
    if not changed:
        return []
    await add_event(tx, run_id, f"run-{status}", now, event)
    return [run_id, *await _closed(tx, changed[0], now, status, error_tag, error_message)]


async def cancel_run(tx: Tx, run_id: str, reason: str | None, now: float) -> list[str]:
    row = await get_run(tx, run_id)
    if row["status"] not in LIVE:
        raise RunNotEligible("cancel", run_id, row["status"], "only running or suspended runs can be cancelled")
    return await end_run(
        tx,
        run_id,
        row["status"],
        now,
        status="cancelled",
        error_tag="Cancelled",
        error_message=reason or "cancelled",
        event={"reason": reason},
    )


async def request_cancel(tx: Tx, run_id: str, reason: str | None, now: float) -> tuple[list[str], bool]:
    """Cancel ``run_id`` with compensation: ``(runs ended, whether the body is to be told)``.

    The request is journaled (``$cancel``): whichever worker enters the run next reads it as it
    replays, and the body's open ``ctx.compensations()`` blocks undo what it did before it ends
    ``cancelled``. A run nobody holds is made due now; one held stays with its holder, which is
    told (in its process) or sees the request when it parks. A run never entered has nothing to
    undo: it is cancelled at once. A suspended run is reopened (a compensation that failed runs
    again).
    """
    row = await get_run(tx, run_id)
    if row["status"] not in LIVE:
        raise RunNotEligible("cancel", run_id, row["status"], "only running or suspended runs can be cancelled")
    if int(row["entries"]) == 0:
        return await cancel_run(tx, run_id, reason, now), False
    text = reason or "cancelled"
    if not await tx.execute("insert_cancel_request", {"run_id": run_id, "reason": text, "now": now}):
        return [], False  # requested already
    await add_event(tx, run_id, "cancel-requested", now, {"reason": reason, "compensate": True})
    if row["status"] == "suspended":
        await tx.execute("delete_failed_compensations", {"run_id": run_id})
        await _reopen(tx, run_id, "suspended", now)
        return [], False
    await tx.execute("wake_for_cancel", {"run_id": run_id, "now": now})
    return [], row["owner"] is not None


async def suspend_run(
    tx: Tx,
    run_id: str,
    reason: str | None,
    now: float,
    *,
    error_tag: str | None = None,
    error_message: str | None = None,
) -> None:
    row = await get_run(tx, run_id)
    if row["status"] != "running":
        raise RunNotEligible("suspend", run_id, row["status"], "only a running run can be suspended")
    await tx.execute(
        "set_status",
        {
            "run_id": run_id,
            "from_status": "running",
            "status": "suspended",
            "error_tag": error_tag,
            "error_message": error_message,
            "wake_at": None,
            "now": now,
        },
    )
    await add_event(tx, run_id, "run-suspended", now, {"reason": reason, "error_tag": error_tag})


async def resume_run(tx: Tx, run_id: str, now: float) -> None:
    row = await get_run(tx, run_id)
    if row["status"] != "suspended":
        hint = "use redrive for a failed run" if row["status"] == "failed" else "only a suspended run can be resumed"
        raise RunNotEligible("resume", run_id, row["status"], hint)
    # once an undo began, a failed compensation runs again and the failure it undid after stays: running
    # that step again would go on with work already undone
    undone = await tx.one("has_compensations", {"run_id": run_id}) is not None
    await tx.execute("delete_failed_compensations" if undone else "delete_failed_journal", {"run_id": run_id})
    await _reopen(tx, run_id, "suspended", now)
    await add_event(tx, run_id, "run-resumed", now, None)


async def _reopen(tx: Tx, run_id: str, from_status: str, now: float) -> None:
    await tx.execute(
        "set_status",
        {
            "run_id": run_id,
            "from_status": from_status,
            "status": "running",
            "error_tag": None,
            "error_message": None,
            "wake_at": now,
            "now": now,
        },
    )
    await tx.execute("clear_failure", {"run_id": run_id, "now": now})
    if from_status in TERMINAL:  # its slot was freed when it ended: a live gated run must hold one
        await gate.retake_slot(tx, await get_run(tx, run_id), now)
    elif from_status == "suspended":  # suspended while it had given its slot back: it takes one before it goes on
        row = await get_run(tx, run_id)
        if row["slot_scope"] is not None and not await gate.holds_slot(tx, run_id):
            await tx.execute("set_waiting_for", {"run_id": run_id, "waiting_for": dump_json({"slot": True})})


def _redrivable(verb: str, row: Row) -> None:
    if row["status"] != "failed":
        hint = {"suspended": "use resume for a suspended run"}.get(row["status"], "only a failed run can be re-driven")
        raise RunNotEligible(verb, row["id"], row["status"], hint)
    if row["discarded_at"] is not None:
        raise RunNotEligible(verb, row["id"], row["status"], "the run was discarded")


async def redrive_run(tx: Tx, run_id: str, now: float) -> None:
    row = await get_run(tx, run_id)
    _redrivable("redrive", row)
    if await tx.one("has_compensations", {"run_id": run_id}) is not None:
        why = "its compensations ran (its work was undone): retry it as a fresh run, or resume-from-step"
        raise RunNotEligible("redrive", run_id, row["status"], why)
    await tx.execute("delete_failed_journal", {"run_id": run_id})
    await _reopen(tx, run_id, "failed", now)
    await add_event(tx, run_id, "run-redriven", now, None)


async def resume_from_step(tx: Tx, run_id: str, step: str, now: float) -> None:
    row = await get_run(tx, run_id)
    _redrivable("resume-from-step", row)
    entries = await journal.load_journal(tx, run_id)
    key = step if "#" in step else f"{step}#0"
    match = next((e for e in entries if e["step_key"] == key), None)
    if match is None:
        known = sorted({e["step_key"].rsplit("#", 1)[0] for e in entries if e["kind"] == "step"})
        raise RunNotEligible(
            "resume-from-step",
            run_id,
            row["status"],
            f"no step {step!r} in its journal; steps: {', '.join(known) or '(none)'}",
        )
    await tx.execute("reoffer_consumed_signals", {"run_id": run_id, "seq": match["seq"]})
    await tx.execute("keep_attempts_from", {"run_id": run_id, "seq": match["seq"]})
    await tx.execute("delete_journal_from", {"run_id": run_id, "seq": match["seq"]})
    await _reopen(tx, run_id, "failed", now)
    await add_event(tx, run_id, "run-redriven", now, {"from_step": key})


async def discard_run(tx: Tx, run_id: str, now: float) -> bool:
    """Mark a failed run discarded; ``False`` (and nothing written) if it already was."""
    row = await get_run(tx, run_id)
    if row["status"] == "failed" and row["discarded_at"] is not None:
        return False
    _redrivable("discard", row)
    await tx.execute("set_discarded", {"run_id": run_id, "now": now})
    await add_event(tx, run_id, "run-discarded", now, None)
    return True


async def adopt_child(tx: Tx, run_id: str, ticket: str, parent_id: str, parent_close: str, now: float) -> Row:
    """Make ``run_id`` (created from the arrival ``ticket``) a child of ``parent_id`` if it has no parent; the row."""
    params = {"run_id": run_id, "ticket": ticket, "parent_id": parent_id, "parent_close": parent_close, "now": now}
    await tx.execute("adopt_child", params)
    return await get_run(tx, run_id)


async def stale_candidates(tx: Tx, before: float, now: float, limit: int = 500) -> list[Row]:
    return await tx.execute("stale_candidates", {"before": before, "now": now, "limit": limit})


async def mark_stalled(tx: Tx, run_id: str, now: float, data: dict[str, Any]) -> None:
    await tx.execute("mark_stalled", {"run_id": run_id, "now": now})
    await add_event(tx, run_id, "run-stalled", now, data)


with_many(finish_run, _finish_many)


async def runs_before(
    tx: Tx,
    before: str,
    *,
    workflow: str | None = None,
    status: str | None = None,
    parent_id: str | None = None,
    source: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[Row]:
    """The runs matching the filters that come after run ``before`` in newest-first order
    (``created_at``, then id, descending); ``UnknownRun`` if ``before`` is no run."""
    cursor = await tx.one("get_run", {"id": before})
    if cursor is None:
        raise UnknownRun(before)
    return await tx.execute(
        "runs_before",
        {
            "workflow": workflow,
            "status": status,
            "parent_id": parent_id,
            "source": source,
            "before_at": cursor["created_at"],
            "before_id": before,
            "limit": limit,
            "offset": offset,
        },
    )
