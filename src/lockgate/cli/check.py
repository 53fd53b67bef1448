"""``lockgate check`` (the deploy-time replay check) and ``lockgate workflows export`` (a run's journal as a file)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from ..app import App
from ..engine.replay_check import JournalExport
from ..inspect import ReplayReport
from ..inspect.replay import check as check_exports
from .common import format_option, load_app, open_inspector, run_async, store_option
from .fit import FitTable
from .groups import EXIT_CODES, cli, workflows
from .output import emit

__all__ = ["check", "export"]

OUTCOME_STYLE = {
    "compatible": "green",
    "version-incompatible": "bold red",
    "nondeterministic": "bold red",
    "unregistered": "bold red",
    "fails": "red",
    "undecidable": "yellow",
}
CHECK_EXIT = """\b
Exit codes:
  0    every live run checked would carry on as recorded
  1    a live run would break (or lockgate refused the request)
  2    bad usage (unknown option, unreadable journal file)
  130  interrupted"""


@cli.command("check", epilog=CHECK_EXIT)
@click.argument("app_ref", metavar="MODULE:APP")
@store_option
@click.option("--workflow", default=None, help="Check only the runs of this workflow.")
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True, help="Runs read per status.")
@click.option("--include-ended", is_flag=True, help="Also check the newest ended runs (a redrive brings them back).")
@click.option(
    "--journal",
    "journals",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Check this exported journal (lockgate workflows export) instead of the store; repeatable.",
)
@format_option
@click.pass_context
def check(
    ctx: click.Context,
    app_ref: str,
    store: str,
    workflow: str | None,
    limit: int,
    include_ended: bool,
    journals: tuple[Path, ...],
    fmt: str,
) -> None:
    """Replay the journals of live runs against the code in MODULE:APP, executing no step.

    Each run is compatible, version-incompatible (its version is not in the code's
    compatible_with), nondeterministic (the code asks for other steps than the journal holds:
    the first diverging one, recorded vs requested), unregistered, fails (the body raises on
    replay) or undecidable. Run it before a deploy: it exits 1 when a live run would break.
    """
    app = load_app(app_ref, param_hint="'MODULE:APP'")
    if journals:
        exports = [JournalExport.from_json(p.read_text(), source=str(p)) for p in journals]
        report = run_async(check_exports(app, exports))
    else:
        report = run_async(_check_store(app, store, workflow, limit, include_ended))
    document = report.to_dict()

    def render(console: Console) -> None:
        _render(console, report)

    emit(fmt, document, render)
    if report.breaking:
        ctx.exit(1)


async def _check_store(app: App, store: str, workflow: str | None, limit: int, include_ended: bool) -> ReplayReport:
    async with open_inspector(app, store) as inspector:
        return await inspector.replay_check(workflow=workflow, limit=limit, include_ended=include_ended)


def _render(console: Console, report: ReplayReport) -> None:
    if not report.verdicts:
        console.print("no runs to check")
        return
    table = FitTable(title="replay check", title_justify="left")
    for column in ("run", "workflow", "status", "outcome", "where", "recorded", "requested / detail"):
        table.add_column(column, no_wrap=column not in ("requested / detail",))
    for v in report.verdicts:
        where = "" if v.position is None else f"#{v.position}"
        detail = v.requested if v.outcome == "nondeterministic" else v.detail
        if v.outcome == "nondeterministic" and v.requested is None:
            detail = "(nothing: the code no longer reaches it)"
        if v.outcome == "version-incompatible":
            detail = f"{v.detail}; compatible_with {list(v.compatible_with)}"
        table.add_row(
            v.run_id,
            v.workflow,
            v.status or "",
            Text(v.outcome, style=OUTCOME_STYLE.get(v.outcome, "")),
            where,
            v.recorded or "",
            detail or "",
        )
    console.print(table)
    breaking = report.breaking
    if breaking:
        console.print(Text(f"{len(breaking)} live run(s) would break under this code", "bold red"))
    else:
        console.print(Text(f"{len(report.verdicts)} run(s) checked: no live run would break", "green"))


@workflows.command("export", epilog=EXIT_CODES)
@click.argument("run_id")
@store_option
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Write here instead of stdout.",
)
def export(run_id: str, store: str, output: Path | None) -> None:
    """Write RUN_ID's journal as a file `lockgate check --journal` and lockgate.testing.replay_check read.

    Values are written as stored: an encrypted run's stay sealed.
    """

    async def read() -> JournalExport:
        async with open_inspector(load_app(None), store) as inspector:
            return await inspector.export_run(run_id)

    text = run_async(read()).to_json()
    if output is None:
        click.echo(text)
    else:
        output.write_text(text + "\n")
        click.echo(f"wrote {output}", err=True)
