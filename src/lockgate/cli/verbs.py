"""The recovery verbs and messages: ``lockgate workflows cancel | suspend | resume | redrive |
resume-from-step | discard | retry | signal | update``.

Each verb asks the store through a ``Client`` (which executes nothing); a refusal such as
``redrive`` of a running run is a ``RunNotEligible`` and exits 1 with its message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import click
from rich.console import Console

from ..facades import Client
from .common import (
    DurationType,
    JsonType,
    app_option,
    format_option,
    inspector_of,
    load_app,
    open_client,
    run_async,
    store_option,
)
from .groups import workflows
from .output import emit, short, status_text

__all__: list[str] = []

Action = Callable[[Client], Awaitable[Any]]


def _apply(verb: str, run_id: str, store: str, fmt: str, action: Action, *, app_ref: str | None = None) -> None:
    """Run ``action`` on an open client, then print the run as it now stands."""
    app = load_app(app_ref)

    async def go() -> dict[str, Any]:
        async with open_client(app, store) as client:
            await action(client)
            return (await inspector_of(client).run(run_id)).to_dict()

    run = run_async(go())
    document: dict[str, Any] = {"verb": verb, "run": run}

    def render(console: Console) -> None:
        console.print(f"{verb}: run {run_id} is now ", status_text(run["status"], run["waiting_on"]), sep="")

    emit(fmt, document, render)


run_id_argument = click.argument("run_id")
reason_option = click.option("--reason", help="Why (kept on the run's event).")


@workflows.command()
@run_id_argument
@reason_option
@click.option(
    "--compensate",
    is_flag=True,
    help="Undo first: the body's open ctx.compensations() blocks run their compensations, then it ends cancelled.",
)
@store_option
@format_option
def cancel(run_id: str, reason: str | None, compensate: bool, store: str, fmt: str) -> None:
    """Cancel a running or suspended run (its children follow their parent-close policy)."""
    _apply("cancel", run_id, store, fmt, lambda c: c.cancel(run_id, reason, compensate=compensate))


@workflows.command()
@run_id_argument
@reason_option
@store_option
@format_option
def suspend(run_id: str, reason: str | None, store: str, fmt: str) -> None:
    """Park a running run until `resume`; its journal is kept."""
    _apply("suspend", run_id, store, fmt, lambda c: c.suspend(run_id, reason))


@workflows.command()
@run_id_argument
@store_option
@format_option
def resume(run_id: str, store: str, fmt: str) -> None:
    """Continue a suspended run: completed steps replay, a failed step runs again."""
    _apply("resume", run_id, store, fmt, lambda c: c.resume(run_id))


@workflows.command()
@run_id_argument
@store_option
@format_option
def redrive(run_id: str, store: str, fmt: str) -> None:
    """Continue a failed run from its journal: completed steps replay, failed ones re-run."""
    _apply("redrive", run_id, store, fmt, lambda c: c.redrive(run_id))


@workflows.command("resume-from-step")
@run_id_argument
@click.argument("step")
@store_option
@format_option
def resume_from_step(run_id: str, step: str, store: str, fmt: str) -> None:
    """Re-run a failed run from STEP (a name, or name#n for its n-th occurrence); earlier steps replay."""
    _apply("resume-from-step", run_id, store, fmt, lambda c: c.resume_from_step(run_id, step))


@workflows.command()
@run_id_argument
@store_option
@format_option
def discard(run_id: str, store: str, fmt: str) -> None:
    """Acknowledge a failed run: it stays failed but leaves the dead-letter list (again: a no-op)."""

    async def go() -> tuple[bool, dict[str, Any]]:
        async with open_client(load_app(None), store) as client:
            changed = await client.discard(run_id)
            return changed, (await inspector_of(client).run(run_id)).to_dict()

    changed, run = run_async(go())
    document: dict[str, Any] = {"verb": "discard", "run": run, "already_discarded": not changed}

    def render(console: Console) -> None:
        if changed:
            console.print(f"discard: run {run_id} is discarded (it stays failed, off the dead-letter list)")
        else:
            console.print(f"discard: run {run_id} was already discarded; nothing changed")

    emit(fmt, document, render)


@workflows.command()
@run_id_argument
@click.option("--payload", type=JsonType(), help="Use this payload (JSON, or @file) instead of the old one.")
@app_option(required=True)
@store_option
@format_option
def retry(run_id: str, payload: Any, app_ref: str, store: str, fmt: str) -> None:
    """Start a fresh run of a failed or cancelled run's workflow (same payload unless given)."""
    app = load_app(app_ref)

    async def go() -> dict[str, Any]:
        async with open_client(app, store) as client:
            handle = await client.retry(run_id, payload_override=payload)
            return handle.to_dict()

    handle = run_async(go())
    document = {"verb": "retry", "retry_of": run_id, "handle": handle}

    def render(console: Console) -> None:
        console.print(f"retry: run {run_id} was retried as run {handle['run_id']}")

    emit(fmt, document, render)


@workflows.command()
@run_id_argument
@click.argument("name")
@click.option("--payload", type=JsonType(), default="{}", show_default=True, help="The signal's payload (JSON).")
@app_option(required=False)
@store_option
@format_option
def signal(run_id: str, name: str, payload: Any, app_ref: str | None, store: str, fmt: str) -> None:
    """Send signal NAME to a live run; it is kept until the body waits for it."""
    _apply("signal", run_id, store, fmt, lambda c: c.signal(run_id, name, payload), app_ref=app_ref)


@workflows.command()
@run_id_argument
@click.argument("name")
@click.option("--payload", type=JsonType(), default="{}", show_default=True, help="The update's payload (JSON).")
@click.option(
    "--timeout", type=DurationType(), default="30s", show_default=True, help="How long to wait for the answer."
)
@app_option(required=False)
@store_option
@format_option
def update(run_id: str, name: str, payload: Any, timeout: float, app_ref: str | None, store: str, fmt: str) -> None:
    """Send update NAME to a live run and print the handler's answer.

    A worker (`lockgate serve`) must be running the workflow: the command waits for the
    body to handle the update, and exits 1 if no answer comes within --timeout.
    """
    app = load_app(app_ref)

    async def go() -> Any:
        async with open_client(app, store) as client:
            return await client.update(run_id, name, payload, timeout=timeout)

    result = run_async(go())
    document = {"verb": "update", "run_id": run_id, "name": name, "result": result}

    def render(console: Console) -> None:
        console.print(f"update {name!r} on run {run_id} answered: {short(result, 1000)}")

    emit(fmt, document, render)
