"""``lockgate workflows list | show | start``."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.text import Text

from ..inspect import RUN_STATUSES, RunDetail
from ..records import RunInfo
from .common import (
    DurationType,
    JsonType,
    app_option,
    count_type,
    format_option,
    load_app,
    open_client,
    open_inspector,
    run_async,
    store_option,
)
from .groups import workflows
from .output import attempts_table, emit, events_table, run_summary, runs_table, short, steps_table

__all__ = ["STATUSES"]

STATUSES = RUN_STATUSES


@workflows.command("list")
@click.option("--workflow", metavar="NAME", help="Only runs of this workflow.")
@click.option("--status", type=click.Choice(STATUSES), help="Only runs in this status.")
@click.option("--dead-letter", is_flag=True, help="Only failed runs nobody has discarded yet.")
@click.option("--source", metavar="SOURCE", help="Only runs started from there (api, cli, event:NAME, child:ID, ...).")
@click.option("--limit", type=count_type(1), default=50, show_default=True)
@click.option("--offset", type=count_type(0), default=0, show_default=True)
@store_option
@format_option
def list_runs(
    workflow: str | None,
    status: str | None,
    dead_letter: bool,
    source: str | None,
    limit: int,
    offset: int,
    store: str,
    fmt: str,
) -> None:
    """Runs, newest first."""
    if dead_letter and source is not None:
        raise click.BadParameter("--dead-letter cannot be combined with --source")
    if dead_letter and status not in (None, "failed"):
        raise click.BadParameter("--dead-letter lists failed runs; it cannot be combined with another status")

    async def go() -> list[RunInfo]:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.runs(
                workflow=workflow, status=status, source=source, dead_letter=dead_letter, limit=limit, offset=offset
            )

    runs = run_async(go())
    document = {"runs": [r.to_dict() for r in runs], "limit": limit, "offset": offset}

    def render(console: Console) -> None:
        if not runs:
            console.print("no runs" + (" on this page" if offset else ""))
            return
        console.print(runs_table(runs))
        if len(runs) == limit:
            console.print(Text(f"more may follow: --offset {offset + limit}", style="dim"))

    emit(fmt, document, render)


@workflows.command("show")
@click.argument("run_id")
@store_option
@format_option
def show(run_id: str, store: str, fmt: str) -> None:
    """One run: its fields, journal, step attempts, events and children."""

    async def go() -> RunDetail:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.run_detail(run_id, children_limit=1000)

    found = run_async(go())
    document = found.to_dict()

    def render(console: Console) -> None:
        console.print(run_summary(found.run))
        if found.steps:
            console.print(steps_table(found.steps))
        if found.attempts:
            console.print(attempts_table(found.attempts))
        if found.events:
            console.print(events_table(found.events))
        if found.children:
            console.print(runs_table(found.children, title="children"))

    emit(fmt, document, render)


@workflows.command("start")
@click.argument("workflow")
@click.option("--payload", type=JsonType(), default="{}", show_default=True, help="The payload (JSON, or @file).")
@click.option("--idempotency-key", metavar="KEY", help="The start's identity: a spent key returns the old run.")
@click.option("--wait", is_flag=True, help="Wait for the run to end and print its result (needs a running worker).")
@click.option("--timeout", type=DurationType(), help="With --wait: give up after this long (exit 1).")
@app_option(required=True)
@store_option
@format_option
def start(
    workflow: str,
    payload: Any,
    idempotency_key: str | None,
    wait: bool,
    timeout: float | None,
    app_ref: str,
    store: str,
    fmt: str,
) -> None:
    """Offer a start of WORKFLOW to the gate and print what became of it."""
    if timeout is not None and not wait:
        raise click.BadParameter("--timeout only applies with --wait", param_hint="'--timeout'")
    app = load_app(app_ref)

    async def go() -> dict[str, Any]:
        async with open_client(app, store, must_exist=False) as client:
            handle = await client.start(workflow, payload, idempotency_key=idempotency_key, wait=wait, timeout=timeout)
            document = handle.to_dict()
            if wait and handle.run_id is not None:
                document["result"] = await client.result(handle.run_id, timeout=timeout)
            return document

    document = run_async(go())

    def render(console: Console) -> None:
        status, run_id = document["status"], document["run_id"]
        line = f"{status}: run {run_id}" if run_id else f"{status} (ticket {document['ticket']})"
        console.print(f"{line} of {document['workflow']}")
        if document["deferral"]:
            deferral = document["deferral"]
            console.print(f"deferred by {deferral['mode']} until {deferral['due_at'] or 'released'}")
        if document["retry_after"] is not None:
            console.print(f"retry after {document['retry_after']:.3f}s")
        if "result" in document:
            console.print(f"result: {short(document['result'], 1000)}")

    emit(fmt, document, render)
