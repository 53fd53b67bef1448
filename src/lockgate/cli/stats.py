"""``lockgate workflows stats``: runs per workflow and status, and the starts waiting at the gate per mode."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..store import runs
from .common import format_option, load_app, open_client, run_async, store_option
from .groups import workflows
from .output import STATUS_STYLE, emit
from .workflows import STATUSES

__all__: list[str] = []


@workflows.command("stats")
@click.option("--workflow", metavar="NAME", help="Only this workflow.")
@store_option
@format_option
def stats(workflow: str | None, store: str, fmt: str) -> None:
    """Runs per workflow and status, and starts parked at the gate per mode (paused, debounce, concurrency, ...)."""

    async def go() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with open_client(load_app(None), store) as client:
            return await client.store.read(runs.count_runs, workflow)

    run_rows, parked_rows = run_async(go())
    names = sorted({r["workflow"] for r in run_rows} | {r["workflow"] for r in parked_rows})
    entries = {name: _empty(name) for name in names}
    for r in run_rows:
        entries[r["workflow"]]["runs"][r["status"]] = int(r["n"])
    for r in parked_rows:
        entries[r["workflow"]]["parked"][r["mode"]] = int(r["n"])
    for entry in entries.values():
        entry["runs"]["total"] = sum(entry["runs"][s] for s in STATUSES)
        entry["parked_total"] = sum(entry["parked"].values())
    listed = list(entries.values())
    totals: dict[str, Any] = {
        "runs": {key: sum(e["runs"][key] for e in listed) for key in (*STATUSES, "total")},
        "parked": _sum_modes(listed),
        "parked_total": sum(e["parked_total"] for e in listed),
    }
    document = {"workflow": workflow, "workflows": listed, "totals": totals}

    def render(console: Console) -> None:
        if not listed:
            console.print("no runs and nothing parked" + (f" for workflow {workflow!r}" if workflow else ""))
            return
        table = Table()
        table.add_column("workflow", no_wrap=True)
        for status in STATUSES:
            table.add_column(status, justify="right", style=STATUS_STYLE.get(status, ""))
        table.add_column("total", justify="right")
        table.add_column("parked at the gate")
        rows = [(e["workflow"], e) for e in listed] + ([("(all)", totals)] if len(listed) > 1 else [])
        for name, entry in rows:
            table.add_row(
                Text(name, style="bold" if entry is totals else ""),
                *(str(entry["runs"][s]) for s in (*STATUSES, "total")),
                _parked_cell(entry["parked"], entry["parked_total"]),
            )
        console.print(table)

    emit(fmt, document, render)


def _empty(name: str) -> dict[str, Any]:
    return {"workflow": name, "runs": dict.fromkeys(STATUSES, 0), "parked": {}, "parked_total": 0}


def _sum_modes(entries: list[dict[str, Any]]) -> dict[str, int]:
    modes: dict[str, int] = {}
    for entry in entries:
        for mode, n in entry["parked"].items():
            modes[mode] = modes.get(mode, 0) + n
    return dict(sorted(modes.items()))


def _parked_cell(parked: dict[str, int], total: int) -> str:
    if not total:
        return "0"
    return f"{total} (" + ", ".join(f"{mode} {n}" for mode, n in sorted(parked.items())) + ")"
