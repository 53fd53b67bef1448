"""``lockgate callbacks complete | reject | list``: approval tokens from the command line."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..clock import to_datetime
from ..facades import Client
from ..inspect.callbacks import TokenInfo
from .common import JsonType, app_option, format_option, inspector_of, load_app, open_client, run_async, store_option
from .groups import cli
from .output import emit, when

__all__ = ["callbacks"]

token_argument = click.argument("token")


def _secret(token: str) -> str:
    """``-`` reads the token from stdin, which keeps it out of the shell's history."""
    return sys.stdin.readline().strip() if token == "-" else token


@cli.group()
def callbacks() -> None:
    """Complete, reject or list approval tokens (ctx.create_token; docs/human-in-the-loop.md)."""


@callbacks.command()
@token_argument
@click.option("--payload", type=JsonType(), default="null", show_default=True, help="The payload (JSON, or @file).")
@app_option(required=False, purpose="imports the modules the token's payload model lives in")
@store_option
@format_option
def complete(token: str, payload: Any, app_ref: str | None, store: str, fmt: str) -> None:
    """Complete TOKEN (its secret; - reads it from stdin) with --payload, validated by its model first."""
    _settle(
        "complete",
        "completed",
        token,
        app_ref,
        store,
        fmt,
        lambda client, secret: client.complete_token(secret, payload),
    )


@callbacks.command()
@token_argument
@click.option("--reason", help="Why: the body's lg.TokenRejected carries it.")
@app_option(required=False)
@store_option
@format_option
def reject(token: str, reason: str | None, app_ref: str | None, store: str, fmt: str) -> None:
    """Complete TOKEN with a rejection: the body's ctx.wait_for_token raises lg.TokenRejected."""
    _settle(
        "reject", "rejected", token, app_ref, store, fmt, lambda client, secret: client.reject_token(secret, reason)
    )


def _settle(
    verb: str,
    done: str,
    token: str,
    app_ref: str | None,
    store: str,
    fmt: str,
    act: Callable[[Client, str], Awaitable[str]],
) -> None:
    """Complete or reject TOKEN with ``act`` (given an open client and the secret) and report its id."""
    app = load_app(app_ref)
    secret = _secret(token)

    async def go() -> str:
        async with open_client(app, store) as client:
            return await act(client, secret)

    token_id = run_async(go())
    emit(fmt, {"verb": verb, "token_id": token_id}, lambda c: c.print(f"{verb}: token {token_id} {done}"))


@callbacks.command("list")
@click.argument("run_id")
@store_option
@format_option
def list_tokens(run_id: str, store: str, fmt: str) -> None:
    """The tokens RUN_ID made, with their state (never their secret)."""

    async def go() -> list[TokenInfo]:
        async with open_client(load_app(None), store) as client:
            return await inspector_of(client).tokens(run_id)

    found = run_async(go())

    def render(console: Console) -> None:
        table = Table()
        for column in ("token id", "name", "state", "uses", "expires (UTC)"):
            table.add_column(column, no_wrap=True)
        for t in found:
            table.add_row(t.id, t.name, t.state, str(t.uses), when(to_datetime(t.expires_at)) or "never")
        console.print(table if found else "no tokens")

    emit(fmt, {"run_id": run_id, "tokens": [t.to_dict() for t in found]}, render)
