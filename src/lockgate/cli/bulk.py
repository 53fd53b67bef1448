"""Verbs over many runs at once: ``lockgate workflows cancel-many | replay-many | migrate-version``.

Both are dry runs unless ``--commit``, need ``--limit`` (the blast radius), act on the
oldest matching runs first, and report each run: succeeded, failed (why), skipped (why)
or would-act, plus whether more runs matched than the limit.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.text import Text

from ..facades.operator import BulkResult, check_reason
from .common import app_option, count_type, format_option, load_app, open_client, run_async, store_option
from .fit import FitTable
from .groups import workflows
from .output import emit, short
from .workflows import STATUSES, usage_errors

__all__: list[str] = []

OUTCOME_STYLE = {"succeeded": "green", "failed": "red", "skipped": "yellow", "would-act": "cyan"}
PAST = {"cancel": "cancelled", "redrive": "re-driven", "retry": "retried"}

limit_option = click.option(
    "--limit",
    type=count_type(1),
    required=True,
    help="Act on at most this many runs, oldest first (required: it bounds what one command can touch).",
)
workflow_option = click.option("--workflow", metavar="NAME", help="Only runs of this workflow.")
commit_option = click.option("--commit", is_flag=True, help="Act for real; without it nothing changes (a dry run).")


@workflows.command("cancel-many")
@limit_option
@click.option("--reason", required=True, help="Why (required: kept on every cancelled run's event).")
@workflow_option
@click.option(
    "--status", type=click.Choice(STATUSES), help="Only runs in this status (default: running and suspended)."
)
@commit_option
@store_option
@format_option
def cancel_many(
    limit: int, reason: str, workflow: str | None, status: str | None, commit: bool, store: str, fmt: str
) -> None:
    """Cancel up to --limit running or suspended runs (a dry run unless --commit)."""
    with usage_errors():
        check_reason(reason, "on every cancelled run's run-cancelled event")

    async def go() -> BulkResult:
        async with open_client(load_app(None), store) as client:
            return await client.cancel_many(reason=reason, limit=limit, workflow=workflow, status=status, commit=commit)

    _report(run_async(go()), limit, fmt)


@workflows.command("replay-many")
@click.option(
    "--mode",
    type=click.Choice(["redrive", "retry"]),
    required=True,
    help="redrive: continue failed runs from their journal; retry: fresh runs of failed or cancelled ones.",
)
@limit_option
@workflow_option
@click.option(
    "--status",
    type=click.Choice(STATUSES),
    help="Only runs in this status (default: failed for redrive; failed and cancelled for retry).",
)
@commit_option
@app_option(required=False, purpose="required with --mode retry, which validates each old payload")
@store_option
@format_option
def replay_many(
    mode: str,
    limit: int,
    workflow: str | None,
    status: str | None,
    commit: bool,
    app_ref: str | None,
    store: str,
    fmt: str,
) -> None:
    """Redrive or retry up to --limit runs (a dry run unless --commit).

    redrive continues each failed run (not discarded) in place: completed steps replay,
    failed ones run again. retry starts a fresh run of each failed or cancelled run with
    its old payload, and needs --app.
    """
    if mode == "retry" and app_ref is None:
        raise click.UsageError("--mode retry needs --app MODULE:APP (each retry validates the old payload)")
    app = load_app(app_ref)

    async def go() -> BulkResult:
        async with open_client(app, store) as client:
            return await client.replay_many(mode=mode, limit=limit, workflow=workflow, status=status, commit=commit)

    _report(run_async(go()), limit, fmt)


def _report(result: BulkResult, limit: int, fmt: str) -> None:
    """Print the per-run results; a committed run that failed makes the command exit 1 (after printing)."""
    document: dict[str, Any] = {**result.to_dict(), "limit": limit}

    def render(console: Console) -> None:
        if not result.committed:
            console.print(Text("dry run: nothing changed; add --commit to act", style="bold yellow"))
        if not result.items:
            console.print(f"no runs to {result.verb}")
            return
        table = FitTable()
        for column in ("run id", "workflow", "status", "outcome", "reason"):
            table.add_column(column, no_wrap=column != "reason")
        for item in result.items:
            table.add_row(
                item.run_id,
                item.workflow,
                item.status,
                Text(item.outcome, style=OUTCOME_STYLE.get(item.outcome, "")),
                short(item.reason, 100),
            )
        console.print(table)
        counts = document["counts"]
        console.print(", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n))
        if result.truncated:
            console.print(
                Text(f"truncated: more than {limit} runs matched; only the oldest {limit} are listed", style="yellow")
            )

    emit(fmt, document, render)
    failed = result.count("failed")
    if failed:
        raise click.ClickException(
            f"{failed} of {len(result.items)} run(s) could not be {PAST[result.verb]} (see the results above)"
        )


@workflows.command("migrate-version")
@click.argument("run_id", metavar="RUN", required=False)
@workflow_option
@click.option("--from", "from_version", metavar="V", help="The version the runs are stamped with (a run: its own).")
@click.option("--to", "to_version", metavar="V2", required=True, help="The version whose code may resume them.")
@click.option("--limit", type=count_type(1), default=10_000, show_default=True, help="List at most this many.")
@commit_option
@app_option(required=False, purpose="checks that --workflow names one of its workflows")
@store_option
@format_option
def migrate_version(
    run_id: str | None,
    workflow: str | None,
    from_version: str | None,
    to_version: str,
    limit: int,
    commit: bool,
    app_ref: str | None,
    store: str,
    fmt: str,
) -> None:
    """Declare live runs of an old version safe for new code: RUN, or --workflow W --from V (a dry run unless
    --commit).

    After checking them (``lockgate check`` replays their journals against the new code), restamp them
    --to the new version: workers whose code runs it claim them, instead of waiting for old code.
    """
    if (run_id is None) == (workflow is None):
        raise click.UsageError("give RUN, or --workflow NAME --from V")
    if workflow is not None and from_version is None:
        raise click.UsageError("--workflow needs --from (the version its runs are stamped with)")
    app = load_app(app_ref)

    async def go() -> BulkResult:
        async with open_client(app, store) as client:
            with usage_errors():
                return await client.migrate_version(
                    run_id,
                    workflow=workflow,
                    from_version=from_version,
                    to_version=to_version,
                    commit=commit,
                    limit=limit,
                )

    _report(run_async(go()), limit, fmt)
