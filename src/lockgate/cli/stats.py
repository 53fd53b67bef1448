"""``lockgate workflows stats``: runs per workflow and status, and the starts waiting at the gate per mode."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..inspect import RUN_STATUSES, Stats
from .common import format_option, load_app, open_inspector, run_async, store_option
from .groups import workflows
from .output import STATUS_STYLE, emit

__all__: list[str] = []


@workflows.command("stats")
@click.option("--workflow", metavar="NAME", help="Only this workflow.")
@store_option
@format_option
def stats(workflow: str | None, store: str, fmt: str) -> None:
    """Runs per workflow and status, and starts parked at the gate per mode (paused, debounce, concurrency, ...)."""

    async def go() -> Stats:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.stats(workflow)

    found = run_async(go())
    document = found.to_dict()
    listed: list[dict[str, Any]] = document["workflows"]
    totals: dict[str, Any] = document["totals"]

    def render(console: Console) -> None:
        if not listed:
            console.print("no runs and nothing parked" + (f" for workflow {workflow!r}" if workflow else ""))
            return
        table = Table()
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

    emit(fmt, document, render)


def _parked_cell(parked: dict[str, int], total: int) -> str:
    if not total:
        return "0"
    return f"{total} (" + ", ".join(f"{mode} {n}" for mode, n in sorted(parked.items())) + ")"
