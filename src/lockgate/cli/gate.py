"""The admission gate from the command line: ``lockgate workflows flow | why | pause | unpause |
pause-key | unpause-key | pauses``.

``flow`` and ``why`` read the ledger (what the gate decided and why); the pause commands
write pause rows that every process honours within about a second.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..clock import to_datetime
from ..facades.operator import check_key_hold
from ..inspect import FlowRow, ParkedStart, Pause, Trace
from .common import (
    DurationType,
    InstantType,
    app_option,
    count_type,
    format_option,
    inspector_of,
    load_app,
    open_client,
    open_inspector,
    run_async,
    store_option,
)
from .fit import FitTable
from .groups import workflows
from .output import emit, short, status_text, when
from .workflows import usage_errors

__all__ = ["human_seconds"]

# The decisions ``flow`` counts, in the order its table shows them.
FLOW_COUNTS = ("in_flight", "admitted", "collapsed", "batched", "dropped", "skipped", "expired", "existing")


def human_seconds(seconds: float | None) -> str:
    """``seconds`` for people: ``850ms``, ``12s``, ``3m05s``, ``2h10m``, ``4d3h`` (empty for ``None``)."""
    if seconds is None:
        return ""
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s".replace(".0s", "s")
    whole = int(seconds)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if whole >= size:
            rest = (whole % size) // sub_size
            return f"{whole // size}{unit}{rest:02d}{sub}" if rest else f"{whole // size}{unit}"
    return f"{whole}s"  # unreachable: whole >= 60 here


# -- flow ---------------------------------------------------------------------------------------


def flow_entry(row: FlowRow) -> dict[str, Any]:
    """One ``flow`` row as JSON: a fixed set of keys, ``waiting`` in seconds (``None``: nothing queued)."""
    return {
        "workflow": row.workflow,
        "key": row.key,
        "queued": row.queued,
        "waiting": None if row.oldest_waiting is None else round(row.oldest_waiting, 3),
        **{name: getattr(row, name) for name in FLOW_COUNTS},
        "modes": dict(sorted(row.modes.items())),
        "sources": dict(sorted(row.sources.items())),
        "flow_waiting": row.flow_waiting,  # runs parked for a step flow-control key (see flow-keys)
    }


@workflows.command("flow")
@click.option("--workflow", metavar="NAME", help="Only this workflow.")
@click.option(
    "--since", type=DurationType(), help="Count the decisions of the last DURATION only (default: every decision)."
)
@store_option
@format_option
def flow(workflow: str | None, since: float | None, store: str, fmt: str) -> None:
    """Pressure at the gate, per workflow and key: queued (and how long the oldest has waited),
    in flight, and what the gate decided (admitted, collapsed, batched, dropped, skipped, expired).
    """

    async def go() -> tuple[datetime | None, list[FlowRow]]:
        async with open_inspector(load_app(None), store) as inspector:
            start = None if since is None else to_datetime(inspector.clock.now() - since)
            return start, await inspector.flow(workflow, since=start)

    start, rows = run_async(go())
    document = {
        "workflow": workflow,
        "since": None if start is None else start.isoformat(),
        "flow": [flow_entry(r) for r in rows],
    }

    def render(console: Console) -> None:
        if not rows:
            scope = f" for workflow {workflow!r}" if workflow else ""
            period = " in that period" if since is not None else ""
            console.print(f"nothing queued, running or decided at the gate{scope}{period}")
            return
        title = None if start is None else f"decisions since {when(start)} UTC"
        table = FitTable(title=title, title_justify="left")
        table.add_column("workflow", no_wrap=True)
        table.add_column("key")
        table.add_column("queued")
        for name in FLOW_COUNTS:
            table.add_column(name.replace("_", " "), justify="right")
        for row in rows:
            counts = (_count(getattr(row, name)) for name in FLOW_COUNTS)
            table.add_row(row.workflow, row.key or "-", _queued_cell(row), *counts)
        console.print(table)

    emit(fmt, document, render)


def _queued_cell(row: FlowRow) -> Text:
    if not row.queued:
        return Text("0", style="dim")
    modes = ", ".join(f"{mode} {n}" if len(row.modes) > 1 else mode for mode, n in sorted(row.modes.items()))
    text = f"{row.queued} ({modes}) waiting={human_seconds(row.oldest_waiting)}"
    events = [f"{source} {n}" for source, n in sorted(row.sources.items()) if source.startswith("event:")]
    if events:  # a start an event triggered names the event it came from
        text += " from " + ", ".join(events)
    return Text(text, style="yellow")


def _count(n: int) -> Text:
    return Text(str(n), style="" if n else "dim")


# -- why ----------------------------------------------------------------------------------------


@workflows.command("why")
@click.argument("ticket")
@app_option(required=False, purpose="gives the concurrency limits an admission estimate uses")
@store_option
@format_option
def why(ticket: str, app_ref: str | None, store: str, fmt: str) -> None:
    """What became of the start with TICKET (printed by `workflows start`, kept on its run).

    A parked start: which control holds it, under which key, its position in that queue and an
    estimated admission. A start folded into another (debounce, batch): which start absorbed it,
    and the run that became of it and how that run ended. Then the start's ledger history.
    """
    app = load_app(app_ref)

    async def go() -> tuple[Trace, float]:
        async with open_inspector(app, store) as inspector:
            return await inspector.trace(ticket), inspector.clock.now()

    found, now = run_async(go())
    document = found.to_dict()

    def render(console: Console) -> None:
        console.print(_summary(found, now))
        console.print(_trace_fields(found))
        if found.history:
            console.print(_history_table(found.history))

    emit(fmt, document, render)


def _summary(t: Trace, now: float) -> str:
    """One sentence: where the start is now."""
    head = f"start {t.ticket} of {t.workflow}"
    folded = f" was folded into start {t.absorbed_by} ({t.outcome}) and" if t.absorbed_by else ""
    if t.state == "parked":
        where = f"is parked by {t.control}" + (f" under key {t.key!r}" if t.key else "")
        place = f", position {t.position} in its queue (0 = next)" if t.position is not None else ""
        if t.estimated_admission is not None:
            eta = t.estimated_admission.timestamp() - now
            estimate = f"; estimated admission {when(t.estimated_admission)} UTC (in {human_seconds(eta)})"
        elif t.control == "paused":
            estimate = "; admitted when the workflow is unpaused"
        else:
            estimate = "; no admission estimate yet"
        return f"{head}{folded} {where}{place}{estimate}"
    if t.run_id is not None:
        ended = f" ({t.run_error})" if t.run_error else ""
        return f"{head}{folded} became run {t.run_id}, now {t.run_status or t.state}{ended}"
    reason = f": {t.reason}" if t.reason else ""
    return f"{head}{folded} ended {t.state}{reason}"


def _trace_fields(t: Trace) -> Table:
    table = FitTable(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold")
    table.add_column()
    fields: list[tuple[str, Any]] = [
        ("ticket", t.ticket),
        ("workflow", t.workflow),
        ("arrival", t.outcome),
        ("state", status_text(t.state)),
        ("control", t.control),
        ("key", t.key),
        ("reason", t.reason),
        ("position", None if t.position is None else str(t.position)),
        ("estimated admission (UTC)", when(t.estimated_admission)),
        ("absorbed by", t.absorbed_by),
        ("run", t.run_id),
        ("run status", t.run_status and status_text(t.run_status)),
        ("run error", t.run_error),
    ]
    for label, value in fields:
        if value not in (None, ""):
            table.add_row(label, value)
    return table


def _history_table(history: list[dict[str, Any]]) -> Table:
    table = FitTable(title="ledger", title_justify="left", keep=("outcome",), drop=("waited", "folded", "kind"))
    for column in ("at (UTC)", "kind", "outcome", "control", "key", "reason", "run", "folded", "waited"):
        table.add_column(column, no_wrap=column in ("at (UTC)", "run"))
    for entry in history:
        at = entry["at"] and datetime.fromisoformat(entry["at"])
        table.add_row(
            when(at or None),
            entry["kind"],
            entry["outcome"],
            entry["control"] or "",
            entry["key"] or "",
            short(entry["reason"], 60),
            entry["run_id"] or "",
            str(entry["folded"]) if entry["folded"] not in (None, 1) else "",
            human_seconds(entry["waited"]),
        )
    return table


# -- pauses -------------------------------------------------------------------------------------


@workflows.command("pause")
@click.argument("workflow")
@click.option("--reason", help="Why (shown by `workflows pauses`).")
@app_option(required=False, purpose="refuses a workflow name the app does not register")
@store_option
@format_option
def pause(workflow: str, reason: str | None, app_ref: str | None, store: str, fmt: str) -> None:
    """Park every new start of WORKFLOW until `unpause` (nothing is discarded; runs already going go on)."""
    app = load_app(app_ref)

    async def go() -> None:
        async with open_client(app, store) as client:
            await client.pause(workflow, reason)

    run_async(go())
    document = {"verb": "pause", "workflow": workflow, "reason": reason}

    def render(console: Console) -> None:
        console.print(f"paused {workflow}: new starts are parked until `lockgate workflows unpause {workflow}`")

    emit(fmt, document, render)


@workflows.command("unpause")
@click.argument("workflow")
@app_option(required=False, purpose="refuses a workflow name the app does not register")
@store_option
@format_option
def unpause(workflow: str, app_ref: str | None, store: str, fmt: str) -> None:
    """Lift a pause of WORKFLOW; the starts it parked are released to the gate in priority order."""
    app = load_app(app_ref)

    async def go() -> tuple[bool, int]:
        async with open_client(app, store) as client:
            paused = await inspector_of(client).pauses()
            was_paused = any(p.kind == "workflow" and p.name == workflow for p in paused)
            return was_paused, await client.unpause(workflow)

    was_paused, released = run_async(go())
    document = {"verb": "unpause", "workflow": workflow, "was_paused": was_paused, "released": released}

    def render(console: Console) -> None:
        if not was_paused and not released:
            console.print(f"{workflow} was not paused; nothing released")
            return
        console.print(
            f"unpaused {workflow}: released {released} parked start(s)"
            + (" (a worker, `lockgate serve`, admits them)" if released else "")
        )

    emit(fmt, document, render)


@workflows.command("pause-key")
@click.argument("key")
@click.option("--until", "until", type=InstantType(), help="Hold the key until this time (ISO 8601; UTC if no offset).")
@click.option("--for", "for_", type=DurationType(), metavar="DURATION", help="Hold the key for this long from now.")
@click.option("--reason", help="Why (shown by `workflows pauses` and on the parked starts).")
@store_option
@format_option
def pause_key(key: str, until: datetime | None, for_: float | None, reason: str | None, store: str, fmt: str) -> None:
    """Hold every admission competing under flow-control KEY (a concurrency or throttle key, or a pool).

    Without --until or --for the key stays held until `unpause-key`. Starts that arrive
    meanwhile are parked, not discarded.
    """
    if until is not None and for_ is not None:
        raise click.UsageError("give --until or --for, not both")

    end = until if for_ is None else datetime.now(UTC) + timedelta(seconds=for_)
    with usage_errors():
        check_key_hold(key, end, datetime.now(UTC).timestamp())

    async def go() -> None:
        async with open_client(load_app(None), store) as client:
            await client.pause_key(key, end, reason)

    run_async(go())
    document = {"verb": "pause-key", "key": key, "until": None if end is None else end.isoformat(), "reason": reason}

    def render(console: Console) -> None:
        held = f"until {when(end)} UTC" if end is not None else f"until `lockgate workflows unpause-key {key}`"
        console.print(f"paused key {key!r}: admissions competing under it wait {held}")

    emit(fmt, document, render)


@workflows.command("unpause-key")
@click.argument("key")
@store_option
@format_option
def unpause_key(key: str, store: str, fmt: str) -> None:
    """Lift the hold on flow-control KEY; the starts it held are re-offered at once."""

    async def go() -> bool:
        async with open_client(load_app(None), store) as client:
            return await client.unpause_key(key)

    was_paused = run_async(go())
    document = {"verb": "unpause-key", "key": key, "was_paused": was_paused}

    def render(console: Console) -> None:
        console.print(f"unpaused key {key!r}" if was_paused else f"key {key!r} was not paused")

    emit(fmt, document, render)


@workflows.command("pauses")
@store_option
@format_option
def pauses(store: str, fmt: str) -> None:
    """The pauses in force: paused workflows and held flow-control keys."""

    async def go() -> list[Pause]:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.pauses()

    found = run_async(go())
    entries = [_pause_entry(p) for p in found]
    document = {"pauses": entries}

    def render(console: Console) -> None:
        if not entries:
            console.print("nothing is paused")
            return
        table = FitTable()
        for column in ("kind", "name", "reason", "since (UTC)", "until (UTC)"):
            table.add_column(column, no_wrap=column != "reason")
        for p in found:
            table.add_row(p.kind, p.name, p.reason or "", when(p.since), when(p.until) or "until lifted")
        console.print(table)

    emit(fmt, document, render)


@workflows.command("pending")
@click.option("--workflow", help="Only the starts of this workflow.")
@click.option("--mode", help="Only the starts parked by this control (debounce, batch, concurrency, paused, ...).")
@click.option("--limit", type=count_type(1, 10_000), default=100, show_default=True)
@store_option
@format_option
def pending(workflow: str | None, mode: str | None, limit: int, store: str, fmt: str) -> None:
    """The starts parked at the gate (oldest arrival first), each with its tickets.

    A start the gate parked has a ticket, not a run yet: `workflows why TICKET` traces it,
    `workflows cancel-start TICKET` withdraws it.
    """

    async def go() -> list[ParkedStart]:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.parked(workflow=workflow, mode=mode, limit=limit)

    found = run_async(go())
    document = {"pending": [p.to_dict() for p in found]}

    def render(console: Console) -> None:
        if not found:
            console.print("no start is parked at the gate")
            return
        # tickets whole (they are what `why` takes), each above its workflow: 80 columns hold a row
        table = FitTable()
        table.add_column("ticket / workflow", no_wrap=True)
        table.add_column("held by", no_wrap=True)
        table.add_column("key", overflow="fold", ratio=1)
        table.add_column("arrivals", justify="right", no_wrap=True)
        table.add_column("due (UTC)", overflow="fold")
        for p in found:
            workflow = Text(p.workflow, style="dim", overflow="fold")
            table.add_row(Text.assemble(p.ticket, "\n", workflow), p.mode, p.key or "", str(p.folded), when(p.due_at))
        console.print(table)

    emit(fmt, document, render)


def _pause_entry(p: Pause) -> dict[str, Any]:
    return {
        "kind": p.kind,
        "name": p.name,
        "reason": p.reason,
        "since": None if p.since is None else p.since.isoformat(),
        "until": None if p.until is None else p.until.isoformat(),
    }


@workflows.command("cancel-start")
@click.argument("ticket")
@click.option("--reason", required=True, help="Why (written on the ledger row).")
@store_option
@format_option
def cancel_start(ticket: str, reason: str, store: str, fmt: str) -> None:
    """Cancel the start TICKET parked at the gate (with every arrival folded into it); it will not run."""

    async def go() -> int:
        async with open_client(load_app(None), store) as client:
            return await client.cancel_start(ticket, reason)

    arrivals = run_async(go())
    document = {"verb": "cancel-start", "ticket": ticket, "reason": reason, "arrivals": arrivals}

    def render(console: Console) -> None:
        console.print(f"cancelled parked start {ticket} ({arrivals} arrival(s) folded into it will not run)")

    emit(fmt, document, render)
