"""How commands print: one JSON document for machines, rich tables for people.

A command builds a plain ``dict`` (its JSON document, with stable keys) and a function that
renders it for a terminal; ``emit`` picks one by ``--format``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import click
from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..records import AttemptInfo, EventInfo, RunInfo, StepInfo
from .fit import FitTable

__all__ = [
    "attempts_table",
    "emit",
    "events_table",
    "make_console",
    "run_line",
    "run_summary",
    "runs_table",
    "short",
    "status_text",
    "steps_table",
    "when",
]

STATUS_STYLE = {
    "running": "cyan",
    "suspended": "yellow",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
}


def make_console(*, stderr: bool = False) -> Console:
    """A console that is wide enough for run ids when output goes to a pipe or a file."""
    console = Console(stderr=stderr, highlight=False, markup=False, soft_wrap=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 160
    return console


def emit(fmt: str, document: dict[str, Any], render: Callable[[Console], None]) -> None:
    """Print ``document`` as JSON (``fmt == "json"``) or through ``render`` as tables."""
    if fmt == "json":
        text = json.dumps(to_jsonable_python(document, fallback=str), indent=2, ensure_ascii=False)
        click.echo(text)
    else:
        render(make_console())


# -- cells -------------------------------------------------------------------------------------


def when(value: datetime | None) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS`` (UTC), or empty."""
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def short(value: Any, limit: int = 60) -> str:
    """``value`` as compact JSON, cut to ``limit`` characters."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(to_jsonable_python(value, fallback=str))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def status_text(status: str, waiting_on: str | None = None) -> Text:
    """A run's status, coloured, with what it waits on (``running (timer)``)."""
    label = status if not waiting_on or status != "running" else f"{status} ({waiting_on})"
    return Text(label, style=STATUS_STYLE.get(status, ""))


def _error(tag: str | None, message: str | None) -> str:
    if tag is None and message is None:
        return ""
    return short(f"{tag}: {message}" if tag else message, 80)


# -- tables ------------------------------------------------------------------------------------


def runs_table(runs: Iterable[RunInfo], *, title: str | None = None) -> Table:
    table = FitTable(title=title, title_justify="left", keep=("run id", "workflow", "status"))
    for column in ("run id", "workflow", "status", "created (UTC)", "finished (UTC)", "error"):
        table.add_column(column, no_wrap=column in ("run id", "created (UTC)", "finished (UTC)"))
    for run in runs:
        table.add_row(
            run.id,
            run.workflow,
            status_text(run.status, run.waiting_on),
            when(run.created_at),
            when(run.finished_at),
            _error(run.error_tag, run.error_message) + (" [discarded]" if run.discarded else ""),
        )
    return table


def run_line(run: RunInfo) -> Text:
    """One run on one line (a followed listing): created, id, workflow, status, error."""
    line = Text(f"{when(run.created_at)}  {run.id}  {run.workflow}  ")
    line.append_text(status_text(run.status, run.waiting_on))
    error = _error(run.error_tag, run.error_message)
    if error:
        line.append(f"  {error}")
    return line


def run_summary(run: RunInfo) -> Table:
    table = FitTable(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold")
    table.add_column()
    fields: list[tuple[str, Any]] = [
        ("run", run.id),
        ("workflow", run.workflow),
        ("status", status_text(run.status, run.waiting_on)),
        ("waits for", run.waiting_match and short(run.waiting_match, 200)),
        ("payload", short(run.payload, 200)),
        ("output", short(run.output, 200)),
        ("error", _error(run.error_tag, run.error_message)),
        ("idempotency key", run.idempotency_key),
        ("version", run.version),
        ("parent", run.parent_id and f"{run.parent_id} (on close: {run.parent_close})"),
        ("retry of", run.retry_of),
        ("ticket", run.ticket),
        ("created (UTC)", when(run.created_at)),
        ("updated (UTC)", when(run.updated_at)),
        ("finished (UTC)", when(run.finished_at)),
        ("wakes at (UTC)", when(run.wake_at)),
        ("owner", run.owner),
        ("body entries", str(run.entries)),
        ("discarded", "yes" if run.discarded else None),
    ]
    for label, value in fields:
        if value not in (None, ""):
            table.add_row(label, value)
    return table


def _clock(values: Iterable[datetime | None]) -> tuple[str, Callable[[datetime | None], str]]:
    """A table's title note and time formatter: times alone under their one date (``times UTC,
    2026-12-05``), the date and time when they span days. Narrow columns fit 80 columns."""
    days = {v.date() for v in values if v is not None}
    if len(days) == 1:
        return f"times UTC, {next(iter(days)).isoformat()}", lambda v: "" if v is None else v.strftime("%H:%M:%S")
    return "times UTC", when


def steps_table(steps: Iterable[StepInfo]) -> Table:
    # "#": the order the body reached each entry, 1, 2, 3, ... (the stored seq may skip numbers)
    steps = list(steps)
    zone, at = _clock(s.finished_at for s in steps)
    table = FitTable(title=f"journal ({zone})", title_justify="left")
    table.add_column("#", no_wrap=True, justify="right")
    table.add_column("step", overflow="fold", max_width=28)
    table.add_column("kind", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("tries", no_wrap=True, justify="right")
    table.add_column("finished", no_wrap=True)
    table.add_column("output / error", min_width=12, overflow="fold", ratio=1)
    for position, step in enumerate(steps, 1):
        outcome = _error(step.error_tag, step.error_message) or short(step.output)
        table.add_row(
            str(position),
            step.key,
            step.kind,
            Text(step.status, style={"completed": "green", "failed": "red"}.get(step.status, "cyan")),
            str(step.attempts) if step.kind in ("step", "compensation") else "",
            at(step.finished_at),
            outcome,
        )
    return table


def attempts_table(attempts: Iterable[AttemptInfo]) -> Table:
    attempts = list(attempts)
    zone, at = _clock([a.started_at for a in attempts] + [a.finished_at for a in attempts])
    table = FitTable(title=f"attempts ({zone})", title_justify="left")
    table.add_column("step", overflow="fold", max_width=28)
    table.add_column("try", no_wrap=True, justify="right")
    table.add_column("status", no_wrap=True)
    table.add_column("started", no_wrap=True)
    table.add_column("finished", no_wrap=True)
    table.add_column("error", overflow="fold", ratio=1)
    for attempt in attempts:
        table.add_row(
            attempt.step_key,
            str(attempt.attempt),
            Text(attempt.status, style="green" if attempt.status == "completed" else "red"),
            at(attempt.started_at),
            at(attempt.finished_at),
            _error(attempt.error_tag, attempt.error_message),
        )
    return table


def events_table(events: Iterable[EventInfo]) -> Table:
    events = list(events)
    zone, at = _clock(e.at for e in events)
    table = FitTable(title=f"events ({zone})", title_justify="left")
    table.add_column("at", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("data", overflow="fold", ratio=1)
    for event in events:
        table.add_row(at(event.at), event.type, short(event.data, 100))
    return table


def display_url(url: str) -> str:
    """``url`` with any password masked, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
