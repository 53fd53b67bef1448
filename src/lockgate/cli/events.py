"""``lockgate events list | show | publish | deliveries | replay``: the domain event log and its fan-out."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..events import DeliveryRecord, EventRecord
from .common import (
    JsonType,
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
from .groups import cli
from .output import emit, short, when

__all__ = ["deliveries_table", "events", "events_table"]


@cli.group()
def events() -> None:
    """Publish domain events and read the event log with each trigger's delivery."""


def events_table(found: list[EventRecord]) -> Table:
    table = FitTable(keep=("event id", "name"), drop=("data", "source"))
    for column in ("event id", "name", "key", "occurred (UTC)", "source", "data"):
        table.add_column(column, no_wrap=column in ("event id", "occurred (UTC)"))
    for ev in found:
        table.add_row(ev.id, ev.name, short(ev.key, 40), when(ev.occurred_at), ev.source, short(ev.data, 60))
    return table


def deliveries_table(found: list[DeliveryRecord]) -> Table:
    table = FitTable()
    for column in ("trigger", "replay", "workflow", "status", "why", "gate", "run id", "ticket"):
        table.add_column(column, no_wrap=column in ("run id", "ticket"))
    for d in found:
        replay = f"#{d.replay}" if d.replay else ""
        row = (d.workflow, d.status, short(d.reason, 60), d.outcome or "", d.run_id or "", d.ticket or "")
        table.add_row(d.trigger, replay, *row)
    return table


@events.command("list")
@click.option("--name", metavar="NAME", help="Only events of this name.")
@click.option(
    "--since", type=click.DateTime(), help="Only events published at or after this time (UTC unless it says)."
)
@click.option("--limit", type=count_type(1), default=50, show_default=True)
@store_option
@format_option
def list_events(name: str | None, since: datetime | None, limit: int, store: str, fmt: str) -> None:
    """Published events, newest first."""
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)

    async def go() -> list[EventRecord]:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.list_events(name=name, since=since, limit=limit)

    found = run_async(go())

    def render(console: Console) -> None:
        console.print(events_table(found) if found else "no events")

    emit(fmt, {"events": [e.to_dict() for e in found], "limit": limit}, render)


@events.command("show")
@click.argument("event_id")
@store_option
@format_option
def show(event_id: str, store: str, fmt: str) -> None:
    """One event with what became of it for each trigger."""

    async def go() -> tuple[EventRecord, list[DeliveryRecord]]:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.get_event(event_id), await inspector.deliveries(event_id)

    event, delivered = run_async(go())
    document = {"event": event.to_dict(), "deliveries": [d.to_dict() for d in delivered]}

    def render(console: Console) -> None:
        console.print(events_table([event]))
        if event.problem:
            console.print(f"problem: {event.problem}")
        console.print(deliveries_table(delivered) if delivered else "no trigger listened for it")

    emit(fmt, document, render)


@events.command("deliveries")
@click.argument("event_id")
@store_option
@format_option
def deliveries(event_id: str, store: str, fmt: str) -> None:
    """What became of EVENT_ID for each trigger: pending, started, skipped (why) or failed (why)."""

    async def go() -> list[DeliveryRecord]:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.deliveries(event_id)

    found = run_async(go())

    def render(console: Console) -> None:
        console.print(deliveries_table(found) if found else "no deliveries")

    emit(fmt, {"event_id": event_id, "deliveries": [d.to_dict() for d in found]}, render)


@events.command("publish")
@click.argument("name")
@click.option("--key", type=JsonType(), default="{}", show_default=True, help="The event key (JSON, or @file).")
@click.option("--payload", type=JsonType(), default="{}", show_default=True, help="The event data (JSON, or @file).")
@click.option("--trace-id", metavar="ID", help="The trace the event (and the runs it starts) belong to.")
@app_option(required=True)
@store_option
@format_option
def publish(name: str, key: Any, payload: Any, trace_id: str | None, app_ref: str, store: str, fmt: str) -> None:
    """Publish the declared event NAME; its triggers are delivered by running workers."""
    app = load_app(app_ref)

    async def go() -> dict[str, Any]:
        async with open_client(app, store) as client:
            event_id = await client.publish(name, key, payload, trace_id=trace_id)
            return {
                "event_id": event_id,
                "name": name,
                "deliveries": [d.to_dict() for d in await inspector_of(client).deliveries(event_id)],
            }

    document = run_async(go())

    def render(console: Console) -> None:
        console.print(f"published {name}: event {document['event_id']}, {len(document['deliveries'])} delivery(ies)")

    emit(fmt, document, render)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@events.command("replay")
@click.option("--event", "event", metavar="NAME", required=True, help="The declared event whose past to replay.")
@click.option("--trigger", "triggers", metavar="NAME", multiple=True, help="Only this trigger (repeatable).")
@click.option(
    "--since", type=click.DateTime(), required=True, help="Events published at or after (UTC unless it says)."
)
@click.option("--until", type=click.DateTime(), help="Events published at or before (default: now).")
@click.option("--status", metavar="S,S", help="Only events whose first delivery ended so: skipped,failed,...")
@click.option("--limit", type=count_type(1), default=100, show_default=True, help="Events read at most.")
@click.option("--commit", is_flag=True, help="Start for real (without it: a dry run saying what would happen).")
@click.option("--force", is_flag=True, help="Replay again what was replayed before.")
@app_option(required=True)
@store_option
@format_option
def replay(
    event: str,
    triggers: tuple[str, ...],
    since: datetime,
    until: datetime | None,
    status: str | None,
    limit: int,
    commit: bool,
    force: bool,
    app_ref: str,
    store: str,
    fmt: str,
) -> None:
    """Offer past events to their triggers again, each through the workflow's gate (a dry run unless --commit)."""
    app = load_app(app_ref)
    statuses = [s.strip() for s in status.split(",") if s.strip()] if status else None
    options: dict[str, Any] = {"trigger": list(triggers) or None, "status": statuses, "limit": limit}

    async def go() -> list[Any]:
        async with open_client(app, store) as client:
            end = _utc(until) if until is not None else datetime.fromtimestamp(client.clock.now(), UTC)
            return await client.replay_events(
                event, since=_utc(since), until=end, commit=commit, force=force, **options
            )

    results = run_async(go())

    def render(console: Console) -> None:
        table = FitTable()
        for column in ("event id", "trigger", "replay", "result", "why", "run id"):
            table.add_column(column, no_wrap=column in ("event id", "run id"))
        for r in results:
            table.add_row(
                r.event_id, r.trigger, f"#{r.replay}" if r.replay else "", r.status, r.reason or "", r.run_id or ""
            )
        console.print(table if results else "no event in the window")
        if not commit:
            console.print("dry run: nothing started (pass --commit)")

    emit(fmt, {"commit": commit, "results": [r.to_dict() for r in results]}, render)
