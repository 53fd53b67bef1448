"""``lockgate workflows list | show | start``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import click
from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.text import Text

from ..errors import InvalidArgument
from ..inspect import RUN_STATUSES, RunDetail, RunFilter, RunPage, split_statuses
from ..records import RunInfo
from .common import (
    DurationType,
    JsonType,
    SinceType,
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
from .output import (
    attempts_table,
    emit,
    events_table,
    make_console,
    run_line,
    run_summary,
    runs_table,
    short,
    steps_table,
)

__all__ = ["STATUSES", "run_filter", "usage_errors"]

STATUSES = RUN_STATUSES


@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
    """Around a check of the query/verb layer made before any store is opened: its ``InvalidArgument``
    is bad usage (exit 2), and nothing is opened or written."""
    try:
        yield
    except InvalidArgument as exc:
        raise click.UsageError(str(exc)) from None


def run_filter(**fields: Any) -> RunFilter:
    """A ``RunFilter`` checked before any store is opened (a filter no run can match is bad usage)."""
    with usage_errors():
        return RunFilter(**fields).check()


def _statuses(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    """``a,b`` as ``("a", "b")``; which statuses exist is ``RunFilter.check``'s to say."""
    if value is None:
        return ()
    found = split_statuses(value)
    if not found:
        raise click.BadParameter("name at least one status", ctx, param)
    return found


FOLLOW_TAIL = 10  # what --follow shows first when --tail is not given


@workflows.command("list")
@click.option("--workflow", metavar="NAME", help="Only runs of this workflow.")
@click.option("--status", type=click.Choice(STATUSES), help="Only runs in this status.")
@click.option(
    "--statuses", metavar="A,B", callback=_statuses, help="Only runs in one of these statuses (comma-separated)."
)
@click.option("--dead-letter", is_flag=True, help="Only failed runs nobody has discarded yet.")
@click.option("--source", metavar="SOURCE", help="Only runs started from there (api, cli, event:NAME, child:ID, ...).")
@click.option("--since", type=SinceType(), help="Only runs created at or after: an ISO time, or a DURATION ago (2h).")
@click.option("--until", type=SinceType(), help="Only runs created before: an ISO time, or a DURATION ago.")
@click.option("--id-prefix", metavar="PREFIX", help="Only runs whose id starts with PREFIX.")
@click.option("--q", "text", metavar="TEXT", help="Only runs with TEXT in their payload or error (case-insensitive).")
@click.option("--limit", type=count_type(1), default=50, show_default=True)
@click.option("--offset", type=count_type(0), default=0, show_default=True)
@click.option("--cursor", metavar="CURSOR", help="Continue below a previous page (its next_cursor).")
@click.option(
    "--tail",
    type=count_type(0),
    metavar="N",
    help="Show the last N runs, oldest first, one line each (with --follow: before the new ones).",
)
@click.option("--follow", is_flag=True, help="Then show each new run as it comes, until Ctrl-C.")
@click.option("--poll", type=DurationType(), default="1s", show_default=True, help="With --follow: how often to look.")
@store_option
@format_option
def list_runs(
    workflow: str | None,
    status: str | None,
    statuses: tuple[str, ...],
    dead_letter: bool,
    source: str | None,
    since: datetime | None,
    until: datetime | None,
    id_prefix: str | None,
    text: str | None,
    limit: int,
    offset: int,
    cursor: str | None,
    tail: int | None,
    follow: bool,
    poll: float,
    store: str,
    fmt: str,
) -> None:
    """Runs, newest first, matching every filter given.

    --q searches the payload and error of at most 5,000 runs per page (the other filters narrow
    them first); when that window ends, the page says so and its cursor continues the search.
    """
    where = run_filter(
        workflow=workflow,
        statuses=(*statuses, *(() if status is None else (status,))),
        source=source,
        since=since,
        until=until,
        id_prefix=id_prefix,
        text=text,
        dead_letter=dead_letter,
    )
    if follow:
        _follow(where, FOLLOW_TAIL if tail is None else tail, poll, store, fmt)
        return
    if tail is not None:
        _tail(where, tail, store, fmt)
        return

    async def go() -> RunPage:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.run_page(where, cursor=cursor, limit=limit, offset=offset)

    page = run_async(go())
    runs = page.items
    document = {
        "runs": [r.to_dict() for r in runs],
        "limit": limit,
        "offset": offset,
        "next_cursor": page.next_cursor,
        "searched": page.searched,
        "filter": where.to_dict(),
    }

    def render(console: Console) -> None:
        if runs:
            console.print(runs_table(runs))
        else:
            console.print("no runs" + (" on this page" if offset or cursor else ""))
        if text is not None and page.next_cursor is not None and len(runs) < limit:
            console.print(
                Text(f"searched {page.searched} runs; more may match: --cursor {page.next_cursor}", style="dim")
            )
        elif page.next_cursor is not None:
            console.print(Text(f"more follow: --cursor {page.next_cursor}", style="dim"))

    emit(fmt, document, render)


def _print_run(console: Console, run: RunInfo, fmt: str) -> None:
    """One run as one line: a JSON document with ``--format json``, else the follow line."""
    if fmt == "json":
        click.echo(json.dumps(to_jsonable_python(run.to_dict(), fallback=str), ensure_ascii=False))
    else:
        console.print(run_line(run))


def _tail(where: RunFilter, tail: int, store: str, fmt: str) -> None:
    """Print the last ``tail`` runs ``where`` keeps, oldest first, and exit (as ``tail -n``)."""

    async def go() -> list[RunInfo]:
        async with open_inspector(load_app(None), store) as inspector:
            return list(reversed((await inspector.run_page(where, limit=tail)).items)) if tail else []

    console = make_console()
    for run in run_async(go()):
        _print_run(console, run, fmt)


def _follow(where: RunFilter, tail: int, poll: float, store: str, fmt: str) -> None:
    """Print the last ``tail`` runs, then each new one (one line, or one JSON document per line) until Ctrl-C."""
    console = make_console()

    async def go() -> None:
        async with open_inspector(load_app(None), store) as inspector:
            async for run in inspector.follow_runs(where, tail=tail, poll=poll):
                _print_run(console, run, fmt)

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a follow ends
        run_async(go())


@workflows.command("children")
@click.argument("run_id")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--cursor", metavar="CURSOR", help="Continue below a previous page (its next_cursor).")
@store_option
@format_option
def children(run_id: str, limit: int, cursor: str | None, store: str, fmt: str) -> None:
    """The runs RUN_ID started (its children), newest first."""

    async def go() -> RunPage:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.children(run_id, cursor=cursor, limit=limit)

    page = run_async(go())
    document = {"run_id": run_id, "children": [r.to_dict() for r in page.items], "next_cursor": page.next_cursor}

    def render(console: Console) -> None:
        if not page.items:
            console.print(f"run {run_id} has no children" + (" on this page" if cursor else ""))
            return
        console.print(runs_table(page.items, title=f"children of {run_id}"))
        if page.next_cursor is not None:
            console.print(Text(f"more follow: --cursor {page.next_cursor}", style="dim"))

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
        async with open_client(app, store) as client:
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
