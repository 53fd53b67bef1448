"""``lockgate schedules create | update | delete | get``: runtime schedules from the command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click
from rich.console import Console

from ..inspect.schedule_views import ScheduleView
from .common import app_option, format_option, load_app, open_client, run_async, store_option
from .fit import FitTable
from .output import emit
from .schedules import schedules

__all__: list[str] = []

F = TypeVar("F", bound=Callable[..., Any])


def _options(*, creating: bool) -> Callable[[F], F]:
    """The options of a schedule, as ``create`` takes them (``update``: only those given change)."""

    def decorate(fn: F) -> F:
        extra = [
            click.option("--cron", metavar="EXPR", help="A cron expression, read in --timezone."),
            click.option("--every", metavar="DURATION", help="An interval such as 15m (instead of --cron)."),
            click.option("--timezone", metavar="ZONE", help="An IANA zone (default UTC)."),
            click.option("--payload", metavar="JSON", help="The runs' payload, checked against the workflow."),
            click.option("--on-overlap", type=click.Choice(["skip", "buffer", "cancel_other"])),
            click.option("--buffer-limit", type=click.IntRange(min=1)),
            click.option("--backfill", metavar="all|DURATION", help="Slots missed while nothing ran to fire."),
            click.option("--jitter", metavar="DURATION"),
            click.option("--max-runtime", metavar="DURATION"),
            click.option("--start-at", metavar="TIME", help="ISO time with an offset: no slot before it."),
            click.option("--end-at", metavar="TIME", help="ISO time with an offset: no slot after it."),
            click.option("--note", metavar="TEXT"),
            click.option("--workflow", required=creating, metavar="NAME"),
        ]
        if creating:
            extra.append(click.option("--paused", is_flag=True, help="Create it paused."))
            extra.append(
                click.option(
                    "--if-exists",
                    type=click.Choice(["error", "update", "skip"]),
                    default="error",
                    show_default=True,
                    help="What an existing ID does.",
                )
            )
        for option in reversed(extra):
            fn = option(fn)
        return fn

    return decorate


def _given(options: dict[str, Any]) -> dict[str, Any]:
    """The options given on the command line, parsed (``--payload`` as JSON, times as ISO)."""
    out = {k: v for k, v in options.items() if v is not None}
    if "payload" in out:
        try:
            out["payload"] = json.loads(out["payload"])
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None
    for name in ("start_at", "end_at"):
        if name in out:
            try:
                out[name] = datetime.fromisoformat(out[name])
            except ValueError:
                hint = "--" + name.replace("_", "-")
                raise click.BadParameter(f"not an ISO time: {out[name]!r}", param_hint=hint) from None
    return out


@schedules.command("create")
@click.argument("schedule_id", metavar="ID")
@_options(creating=True)
@app_option(required=True, purpose="")
@store_option
@format_option
def create(schedule_id: str, app_ref: str, store: str, fmt: str, **options: Any) -> None:
    """Create runtime schedule ID starting --workflow by --cron or --every."""
    given = _given(options)

    async def go() -> ScheduleView:
        async with open_client(load_app(app_ref), store) as client:
            return await client.schedules.create(schedule_id, **given)

    _show(run_async(go()), fmt)


@schedules.command("update")
@click.argument("schedule_id", metavar="ID")
@_options(creating=False)
@app_option(required=True, purpose="")
@store_option
@format_option
def update(schedule_id: str, app_ref: str, store: str, fmt: str, **options: Any) -> None:
    """Change the given options of runtime schedule ID (the rest stay)."""
    given = _given(options)

    async def go() -> ScheduleView:
        async with open_client(load_app(app_ref), store) as client:
            return await client.schedules.update(schedule_id, **given)

    _show(run_async(go()), fmt)


@schedules.command("delete")
@click.argument("schedule_id", metavar="ID")
@app_option(required=False, purpose="not needed")
@store_option
@format_option
def delete(schedule_id: str, app_ref: str | None, store: str, fmt: str) -> None:
    """Delete runtime schedule ID (a run it started goes on)."""

    async def go() -> None:
        async with open_client(load_app(app_ref), store) as client:
            await client.schedules.delete(schedule_id)

    run_async(go())
    emit(fmt, {"schedule": schedule_id, "deleted": True}, lambda c: c.print(f"{schedule_id}: deleted"))


@schedules.command("get")
@click.argument("schedule_id", metavar="ID")
@app_option(required=False, purpose="shows a declared schedule's options")
@store_option
@format_option
def get(schedule_id: str, app_ref: str | None, store: str, fmt: str) -> None:
    """Show schedule ID, declared or runtime: its options and state."""

    async def go() -> ScheduleView:
        async with open_client(load_app(app_ref), store) as client:
            return await client.schedules.get(schedule_id)

    _show(run_async(go()), fmt)


def _show(view: ScheduleView, fmt: str) -> None:
    document = view.to_dict()

    def render(console: Console) -> None:
        table = FitTable(title=f"{view.id} ({view.origin})", show_header=False)
        table.add_column("field")
        table.add_column("value")
        for key, value in document.items():
            if value is not None and key != "id":
                shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
                table.add_row(key, shown)
        console.print(table)

    emit(fmt, document, render)
