"""``lockgate cluster status``: the workers sharing a store, what each holds, which look dead."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..clock import CLOCK_TOLERANCE
from .common import format_option, load_app, open_inspector, run_async, store_option
from .fit import FitTable
from .groups import EXIT_CODES, cli
from .output import emit

__all__ = ["cluster", "status_document"]

STATE_STYLE = {"live": "green", "stale": "bold red", "stopped": "dim"}


@cli.group(epilog=EXIT_CODES)
def cluster() -> None:
    """See the worker processes that share a store (executes nothing)."""


async def status_document(store: str) -> dict[str, Any]:
    """The ``cluster status`` snapshot of ``store``: dialect, workers, sweep leases."""
    async with open_inspector(load_app(None), store) as inspector:
        return (await inspector.cluster_status()).to_dict()


@cluster.command("status", epilog=EXIT_CODES)
@click.option("--all", "show_all", is_flag=True, help="Also list workers that stopped cleanly.")
@store_option
@format_option
def status(show_all: bool, store: str, fmt: str) -> None:
    """Each worker: id, host, pid, heartbeat age, runs held, sweep leases held.

    A worker whose heartbeat is older than its lease is flagged stale: it is dead or cut
    off, and other workers take its runs over as their leases lapse. ``clock`` is how far
    the worker's own clock is from the database's (ahead: +), flagged past 1 s.
    """
    document = run_async(status_document(store))
    if not show_all:
        document["workers"] = [w for w in document["workers"] if w["state"] != "stopped"]

    def render(console: Console) -> None:
        workers = document["workers"]
        console.print(f"store dialect: {document['dialect']}")
        if not workers:
            console.print("no workers" + ("" if show_all else " running (--all lists stopped ones)"))
        else:
            console.print(_workers_table(workers))
        stale = [w for w in workers if w["state"] == "stale"]
        if stale:
            console.print(
                Text(f"{len(stale)} stale worker(s): heartbeat older than the lease; their runs move on", "red")
            )
        if document["sweeps"]:
            console.print(_sweeps_table(document["sweeps"]))
        if document.get("waiting"):
            console.print(_waiting_table(document["waiting"]))

    emit(fmt, document, render)


def _workers_table(workers: list[dict[str, Any]]) -> Table:
    table = FitTable(title="workers", title_justify="left", keep=("state",))
    columns: tuple[str, ...] = ("worker", "host", "pid", "state", "heartbeat", "lease", "clock", "runs held")
    columns += ("sweeps", "labels", "takes")
    for column in columns:
        table.add_column(column, no_wrap=True, justify="right" if column in ("pid", "runs held") else "left")
    for w in workers:
        table.add_row(
            w["id"],
            w["host"],
            str(w["pid"]),
            Text(w["state"], style=STATE_STYLE.get(w["state"], "")),
            f"{w['heartbeat_age']:.1f}s ago",
            f"{w['lease']:g}s",
            clock_text(w.get("clock_offset", 0.0)),
            str(w["runs_held"]),
            ", ".join(w["sweeps"]),
            ",".join(f"{k}={v}" for k, v in (w.get("labels") or {}).items()),
            offers_text(w.get("offers") or {}),
        )
    return table


def offers_text(offers: dict[str, Any]) -> str:
    """What a worker takes: each workflow with the versions its code runs (``report@2,1``)."""
    shown = []
    for wf, offer in offers.items():
        versions = [v for v in offer.get("versions", ()) if v]
        shown.append(f"{wf}@{','.join(versions)}" if versions else wf)
    return " ".join(shown)


def _waiting_table(waiting: list[dict[str, Any]]) -> Table:
    table = FitTable(title="due runs no live worker takes", title_justify="left")
    for column in ("workflow", "version", "runs", "due for", "waiting on", "live workers offer"):
        table.add_column(column, no_wrap=True)
    for g in waiting:
        style = "red" if g["reported"] else "yellow"
        on = "version" if g["reason"] == "version" else "a worker (labels, --workflows)"
        offered = ", ".join(v or "(none)" for v in g["offered"]) or "-"
        version = "-" if g["version"] is None else g["version"]
        table.add_row(g["workflow"], version, str(g["runs"]), Text(f"{g['due_for']:.0f}s", style), on, offered)
    return table


def clock_text(offset: float) -> Text:
    """A worker's clock against the database's: ``+0.002s``; red past the tolerance."""
    skewed = abs(offset) > CLOCK_TOLERANCE
    return Text(f"{offset:+.3f}s" + (" (skewed)" if skewed else ""), style="red" if skewed else "")


def _sweeps_table(sweeps: list[dict[str, Any]]) -> Table:
    table = FitTable(title="sweep leases", title_justify="left")
    for column in ("sweep", "held by", "lease left", "ticks"):
        table.add_column(column, no_wrap=True)
    for s in sweeps:
        holder = s["owner"] or Text(f"nobody (last: {s['last_owner']})", style="yellow")
        table.add_row(s["name"], holder, f"{s['lease_left']:.1f}s", str(s["ticks"]))
    return table
