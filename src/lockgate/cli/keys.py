"""``lockgate keys``: make an encryption key, and seal stored values again under the newest one."""

from __future__ import annotations

import click
from rich.console import Console

from ..crypto import KEYS_ENV, Keyring, generate_key
from ..inspect import Rotation
from .common import count_type, format_option, load_app, open_inspector, run_async, store_option
from .fit import FitTable
from .groups import cli
from .output import emit

__all__: list[str] = []


@cli.group()
def keys() -> None:
    """Encryption keys of workflows declared with encrypt_steps=True."""


@keys.command("generate")
@click.option("--id", "key_id", metavar="ID", help="The key's id (default: a random one).")
def generate(key_id: str | None) -> None:
    """Print a new key (id:base64 of 32 random bytes); put it first in $LOCKGATE_ENCRYPTION_KEYS
    (or, as the only key, in $LOCKGATE_ENCRYPTION_KEY)."""
    click.echo(generate_key(key_id))


@keys.command("rotate")
@click.option("--workflow", metavar="NAME", help="Only the runs of this workflow.")
@click.option("--batch", type=count_type(1), default=500, show_default=True, help="Rows per commit.")
@click.option("--dry-run", is_flag=True, help="Count what would be sealed again; write nothing.")
@store_option
@format_option
def rotate(workflow: str | None, batch: int, dry_run: bool, store: str, fmt: str) -> None:
    """Seal every stored value again under the newest key of $LOCKGATE_ENCRYPTION_KEYS.

    Safe while workers run (a row a worker writes meanwhile keeps the worker's value) and
    resumable (run it again: values already under the newest key are left alone). Values
    no listed key opens are listed, never dropped; remove an old key only once none are left.
    """
    keyring = Keyring.load()
    if not keyring:
        raise click.UsageError(f"no key: set {KEYS_ENV} (newest first) to rotate to its first key")

    async def go() -> Rotation:
        async with open_inspector(load_app(None), store, writes=not dry_run) as inspector:
            return await inspector.rotate_keys(workflow=workflow, batch=batch, dry_run=dry_run)

    report = run_async(go())

    def render(console: Console) -> None:
        verb = "would seal again" if dry_run else "sealed again"
        console.print(
            f"newest key {report.newest}: {report.values_resealed} value(s) {verb}, "
            f"{report.values_current} already current, {report.rows_scanned} row(s) scanned"
            + (
                f", {report.rows_changed_meanwhile} row(s) changed meanwhile (run again)"
                if report.rows_changed_meanwhile
                else ""
            )
        )
        if report.unopened:
            table = FitTable("table", "row", "column", "key id", title="values no listed key opens")
            for u in report.unopened:
                table.add_row(u.table, u.row, u.column, u.key_id or "")
            console.print(table)

    emit(fmt, report.to_dict(), render)
    if report.unopened:
        raise click.exceptions.Exit(1)  # values are left that the old key alone opens
