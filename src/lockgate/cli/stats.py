"""``lockgate workflows stats``: runs per workflow and status, and the starts waiting at the gate per mode."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..inspect import MAX_HOURS, RUN_STATUSES, Hours, Stats
from .common import format_option, load_app, open_inspector, run_async, store_option
from .fit import FitTable
from .groups import workflows
from .output import STATUS_STYLE, emit, when

__all__ = ["sparkline"]

SPARKS = "▁▂▃▄▅▆▇█"


@workflows.command("stats")
@click.option("--workflow", metavar="NAME", help="Only this workflow.")
@click.option(
    "--hours",
    type=click.IntRange(min=1, max=MAX_HOURS),
    metavar="N",
    help="Also the runs created in each of the last N hours, as a sparkline per workflow.",
)
@store_option
@format_option
def stats(workflow: str | None, hours: int | None, store: str, fmt: str) -> None:
    """Runs per workflow and status, and starts parked at the gate per mode (paused, debounce, concurrency, ...)."""

    async def go() -> Stats:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.stats(workflow, hours=hours)

    found = run_async(go())
    document = found.to_dict()
    listed: list[dict[str, Any]] = document["workflows"]
    totals: dict[str, Any] = document["totals"]

    def render(console: Console) -> None:
        if not listed:
            console.print("no runs and nothing parked" + (f" for workflow {workflow!r}" if workflow else ""))
            return
        table = FitTable()
        table.add_column("workflow", no_wrap=True)
        for status in RUN_STATUSES:
            table.add_column(status, justify="right", style=STATUS_STYLE.get(status, ""))
        table.add_column("total", justify="right")
        table.add_column("parked at the gate")
        rows = [(e["workflow"], e) for e in listed] + ([("(all)", totals)] if len(listed) > 1 else [])
        for name, entry in rows:
            table.add_row(
                Text(name, style="bold" if entry is totals else ""),
                *(str(entry["runs"][s]) for s in (*RUN_STATUSES, "total")),
                _parked_cell(entry["parked"], entry["parked_total"]),
            )
        console.print(table)
        if found.hourly is not None:
            console.print(_hourly_table(found.hourly))

    emit(fmt, document, render)


def _hourly_table(hourly: Hours) -> Table:
    """Runs created per hour, per workflow: a sparkline (oldest hour at the left), totals beside it."""
    title = f"runs created per hour, the last {hourly.hours} hour(s) from {when(hourly.start)} UTC"
    table = FitTable(title=title, title_justify="left")
    table.add_column("workflow", no_wrap=True)
    table.add_column("per hour", no_wrap=True)
    table.add_column("peak", justify="right")
    table.add_column("created", justify="right")
    table.add_column("failed", justify="right", style=STATUS_STYLE["failed"])
    rows = hourly.workflows + ([hourly.totals] if len(hourly.workflows) != 1 else [])
    for entry in rows:
        table.add_row(
            Text(entry.workflow, style="bold" if entry is hourly.totals else ""),
            sparkline(entry.started),
            str(max(entry.started, default=0)),
            str(entry.total),
            str(sum(entry.failed)),
        )
    return table


def sparkline(counts: list[int]) -> str:
    """``counts`` as block characters scaled to the largest (a blank for zero, ``▁`` for the least above it)."""
    top = max(counts, default=0)
    if top == 0:
        return " " * len(counts)
    return "".join(" " if n == 0 else SPARKS[min(len(SPARKS) - 1, (n * len(SPARKS) - 1) // top)] for n in counts)


def _parked_cell(parked: dict[str, int], total: int) -> str:
    if not total:
        return "0"
    return f"{total} (" + ", ".join(f"{mode} {n}" for mode, n in sorted(parked.items())) + ")"
