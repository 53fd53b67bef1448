"""``lockgate schedules list | next | firings | run | pause | unpause | backfill``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from ..engine.firing import Fired
from ..engine.schedules import BackfillSlot
from ..errors import InvalidArgument
from ..inspect import FiringInfo, ScheduleInfo
from .common import (
    app_option,
    count_type,
    format_option,
    load_app,
    open_client,
    open_inspector,
    run_async,
    store_option,
)
from .fit import FitTable
from .groups import cli
from .output import STATUS_STYLE, emit, when

__all__: list[str] = []

FIRING_STYLE = {**STATUS_STYLE, "skipped": "yellow", "buffered": "cyan", "claimed": "cyan", "started": "blue"}


@cli.group()
def schedules() -> None:
    """Schedules: what fires when, the firing ledger, pause, run now and backfill."""


@schedules.command("list")
@app_option(required=False, purpose="shows next firing times and marks the schedules it declares")
@store_option
@format_option
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Schedules per page.")
@click.option("--cursor", default=None, help="Start after this schedule id (the page before printed it).")
@click.option("--prefix", default=None, help="Only schedules whose id starts with this.")
@click.option("--workflow", default=None, help="Only schedules of this workflow.")
def list_schedules(
    app_ref: str | None,
    store: str,
    fmt: str,
    limit: int,
    cursor: str | None,
    prefix: str | None,
    workflow: str | None,
) -> None:
    """Schedules by id, a page at a time, with their next firing; one no code declares any more is shown as orphaned."""

    async def go() -> tuple[list[ScheduleInfo], str | None]:
        async with open_inspector(load_app(app_ref), store) as inspector:
            return await inspector.schedule_page(limit=limit, cursor=cursor, workflow=workflow, prefix=prefix)

    infos, after = run_async(go())

    def render(console: Console) -> None:
        if not infos:
            console.print("no schedules")
            return
        table = FitTable()
        for column in ("schedule", "workflow", "when", "zone", "state", "next firing", "firings", "missed"):
            table.add_column(column, no_wrap=column in ("schedule", "next firing"))
        for i in infos:
            state = Text("orphaned", style="red") if i.orphaned else Text("")
            if i.paused:
                state.append(("paused" if not state else ", paused"), style="yellow")
            if not state:
                state = Text("active", style="green")
            fired = ", ".join(f"{n} {s}" for s, n in sorted(i.firings.items()))
            next_at = "" if i.next_at is None else i.next_at.strftime("%Y-%m-%d %H:%M:%S %Z")
            table.add_row(i.name, i.workflow, i.spec, i.timezone, state, next_at, fired, str(i.missed or ""))
        console.print(table)
        if after is not None:
            console.print(f"more: --cursor {after}")

    emit(fmt, {"schedules": [i.to_dict() for i in infos], "next_cursor": after}, render)


@schedules.command("next")
@click.argument("name")
@click.option("--count", type=click.IntRange(min=1, max=1000), default=10, show_default=True)
@app_option(required=True)
@format_option
def next_slots(name: str, count: int, app_ref: str, fmt: str) -> None:
    """Preview the next COUNT slots of NAME, in its zone and in UTC (reads no store)."""
    app = load_app(app_ref)
    sched = app.schedules().get(name)
    if sched is None:
        raise InvalidArgument(f"unknown schedule {name!r} (declared: {', '.join(sorted(app.schedules())) or 'none'})")
    now = datetime.now(UTC).timestamp()
    slots = [sched.local(s) for s in sched.next_slots(now, count)]
    document = {
        "schedule": name,
        "spec": sched.spec,
        "timezone": sched.timezone,
        "slots": [{"local": s.isoformat(), "utc": s.astimezone(UTC).isoformat()} for s in slots],
    }

    def render(console: Console) -> None:
        table = FitTable(title=f"{name}: {sched.spec} ({sched.timezone})")
        table.add_column("local")
        table.add_column("UTC")
        for s in slots:
            table.add_row(s.strftime("%Y-%m-%d %H:%M:%S %Z"), s.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"))
        console.print(table)

    emit(fmt, document, render)


@schedules.command("firings")
@click.argument("name")
@click.option("--limit", type=count_type(1), default=50, show_default=True)
@app_option(required=False, purpose="not needed: the ledger is in the store")
@store_option
@format_option
def firings(name: str, limit: int, app_ref: str | None, store: str, fmt: str) -> None:
    """The firing ledger of NAME, newest first: each slot claimed, skipped (why), started, failed."""

    async def go() -> list[FiringInfo]:
        async with open_inspector(load_app(app_ref), store) as inspector:
            return await inspector.schedule_firings(name, limit)

    rows = run_async(go())

    def render(console: Console) -> None:
        if not rows:
            console.print(f"no firings of {name!r} yet")
            return
        table = FitTable(keep=("status", "run"), drop=("ticket", "finished"))
        for column in ("scheduled at (UTC)", "cause", "status", "why", "run", "ticket", "finished"):
            table.add_column(column, no_wrap=column != "why")
        for f in rows:
            status = Text(f.status, style=FIRING_STYLE.get(f.status, ""))
            table.add_row(
                when(f.scheduled_at), f.cause, status, f.why or "", f.run_id or "", f.ticket or "", when(f.finished_at)
            )
        console.print(table)

    emit(fmt, {"schedule": name, "firings": [f.to_dict() for f in rows]}, render)


@schedules.command("run")
@click.argument("name")
@app_option(required=True)
@store_option
@format_option
def run_now(name: str, app_ref: str, store: str, fmt: str) -> None:
    """Fire NAME now: a manual firing (source schedule:NAME+manual), outside the overlap policy."""

    async def go() -> Fired:
        async with open_client(load_app(app_ref), store) as client:
            return await client.run_schedule(name)

    fired = run_async(go())

    def render(console: Console) -> None:
        console.print(f"{name}: {fired.status}" + (f", run {fired.run_id}" if fired.run_id else ""))

    emit(fmt, fired.to_dict(), render)


@schedules.command("pause")
@click.argument("name")
@click.option("--reason", metavar="TEXT", help="Shown in `schedules list`.")
@app_option(required=False, purpose="lets a schedule no engine has recorded yet be paused")
@store_option
@format_option
def pause(name: str, reason: str | None, app_ref: str | None, store: str, fmt: str) -> None:
    """Stop NAME firing on every replica until `unpause`."""
    _set_paused(name, True, reason, app_ref, store, fmt)


@schedules.command("unpause")
@click.argument("name")
@app_option(required=False, purpose="lets a schedule no engine has recorded yet be unpaused")
@store_option
@format_option
def unpause(name: str, app_ref: str | None, store: str, fmt: str) -> None:
    """Let NAME fire again from its next slot (slots passed while paused are not caught up)."""
    _set_paused(name, False, None, app_ref, store, fmt)


def _set_paused(name: str, paused: bool, reason: str | None, app_ref: str | None, store: str, fmt: str) -> None:
    async def go() -> None:
        async with open_client(load_app(app_ref), store) as client:
            if paused:
                await client.pause_schedule(name, reason)
            else:
                await client.unpause_schedule(name)

    run_async(go())
    emit(fmt, {"schedule": name, "paused": paused}, lambda c: c.print(f"{name}: {'paused' if paused else 'unpaused'}"))


@schedules.command("backfill")
@click.argument("name")
@click.option("--from", "start", required=True, metavar="TIME", help="ISO time; without an offset, in the zone.")
@click.option("--to", "end", required=True, metavar="TIME", help="ISO time (inclusive); as --from.")
@click.option("--commit", is_flag=True, help="Fire them; without it, only list the slots.")
@app_option(required=True)
@store_option
@format_option
def backfill(name: str, start: str, end: str, commit: bool, app_ref: str, store: str, fmt: str) -> None:
    """Fire NAME's slots between --from and --to that have not fired (a dry run unless --commit)."""
    app = load_app(app_ref)
    sched = app.schedules().get(name)
    if sched is None:
        raise InvalidArgument(f"unknown schedule {name!r} (declared: {', '.join(sorted(app.schedules())) or 'none'})")
    bounds = [_parse(text, option, sched.zone) for text, option in ((start, "--from"), (end, "--to"))]

    async def go() -> list[BackfillSlot]:
        async with open_client(app, store) as client:
            return await client.backfill_schedule(name, bounds[0], bounds[1], commit=commit)

    slots = run_async(go())
    document: dict[str, Any] = {"schedule": name, "commit": commit, "slots": [s.to_dict() for s in slots]}

    def render(console: Console) -> None:
        if not slots:
            console.print("no slots in that range")
            return
        table = FitTable(title=None if commit else "dry run: nothing fired (add --commit)")
        table.add_column("slot (local)")
        table.add_column("UTC")
        table.add_column("outcome")
        table.add_column("run")
        for s in slots:
            run = "" if s.fired is None or s.fired.run_id is None else s.fired.run_id
            outcome = s.outcome + (f" ({s.fired.why})" if s.fired is not None and s.fired.why else "")
            table.add_row(
                s.scheduled_at.astimezone(sched.zone).strftime("%Y-%m-%d %H:%M:%S %Z"),
                when(s.scheduled_at.astimezone(UTC)),
                outcome,
                run,
            )
        console.print(table)

    emit(fmt, document, render)


def _parse(text: str, option: str, zone: Any) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"not an ISO time: {text!r} (e.g. 2026-03-01T00:00)", param_hint=option) from None
    return value.replace(tzinfo=zone) if value.tzinfo is None else value
