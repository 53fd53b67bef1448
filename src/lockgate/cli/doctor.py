"""``lockgate doctor``: one-shot health report of a store; exits non-zero when something needs a person."""

from __future__ import annotations

import click
from rich.console import Console
from rich.text import Text

from ..inspect import DoctorReport, DoctorSettings
from .common import DurationType, format_option, load_app, open_inspector, run_async, store_option
from .fit import FitTable
from .groups import cli
from .output import emit

__all__ = ["doctor"]

STATUS_STYLE = {"ok": "green", "warn": "yellow", "problem": "bold red", "skipped": "dim"}
DOCTOR_EXIT = """\b
Exit codes:
  0    nothing needs a person (warnings may be listed)
  1    something needs a person (a problem), or lockgate refused the request
  2    bad usage
  130  interrupted"""


@cli.command("doctor", epilog=DOCTOR_EXIT)
@store_option
@click.option("--app", "app_ref", default=None, metavar="MODULE:APP", help="Judge schedules against this app.")
@click.option("--stall-after", type=DurationType(), default="30m", show_default=True, help="The engines' stall_after.")
@click.option("--retention", type=DurationType(), default="30d", show_default=True, help="The engines' retention.")
@format_option
@click.pass_context
def doctor(ctx: click.Context, store: str, app_ref: str | None, stall_after: float, retention: float, fmt: str) -> None:
    """Check a store's health at once: migrations, workers and their heartbeats, stalled and
    crash-looped runs, parked starts past their start timeout, orphaned slots, schedules
    behind, retention backlog and store size."""
    settings = DoctorSettings(stall_after=stall_after, retention=retention)

    async def read() -> DoctorReport:
        async with open_inspector(load_app(app_ref), store) as inspector:
            return await inspector.doctor(settings)

    report = run_async(read())

    def render(console: Console) -> None:
        table = FitTable(title="lockgate doctor", title_justify="left")
        for column in ("check", "status", "summary"):
            table.add_column(column, no_wrap=column != "summary")
        for f in report.findings:
            table.add_row(f.check, Text(f.status, style=STATUS_STYLE[f.status]), f.summary)
        console.print(table)
        for f in report.findings:
            if f.status in ("problem", "warn") and f.details:
                console.print(Text(f"{f.check}:", style=STATUS_STYLE[f.status]))
                for d in f.details:
                    console.print("  " + ", ".join(f"{k}={_shown(v)}" for k, v in d.items()))
        verdict = "something needs a person" if report.needs_person else "nothing needs a person"
        console.print(Text(verdict, style="bold red" if report.needs_person else "green"))

    emit(fmt, report.to_dict(), render)
    if report.needs_person:
        ctx.exit(1)


def _shown(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)
