"""``lockgate flow-keys list|show|set``: step flow-control keys, their limits and what they hold."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..errors import LockgateError
from .common import DurationType, format_option, load_app, open_client, open_inspector, run_async, store_option
from .fit import FitTable
from .gate import human_seconds
from .groups import EXIT_CODES, cli
from .output import emit

__all__ = ["flow_keys"]


_KEEP: Any = object()  # an option not given: the key keeps that limit


class LimitType(click.ParamType):  # type: ignore[type-arg]
    """A positive count, or ``none`` to lift that limit."""

    name = "N|none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or value is _KEEP or isinstance(value, int):
            return value
        if str(value).strip().lower() == "none":
            return None
        try:
            return int(value)
        except ValueError:
            self.fail(f"expected a whole number or 'none', got {value!r}", param, ctx)


@cli.group("flow-keys", epilog=EXIT_CODES)
def flow_keys() -> None:
    """Step flow-control keys: the limits in force and what waits under each (executes nothing)."""


async def _rows(store: str, key: str | None) -> list[dict[str, Any]]:
    async with open_inspector(load_app(None), store) as inspector:
        return [r.to_dict() for r in await inspector.flow_keys(key)]


def _limit(row: dict[str, Any]) -> str:
    parts = []
    if row["rate"] is not None:
        parts.append(f"{row['rate']}{' units' if row.get('weighted') else ''} / {human_seconds(row['period'])}")
        if row.get("burst") is not None:
            parts.append(f"burst {row['burst']}")
    if row["parallelism"] is not None:
        parts.append(f"{row['parallelism']} at once")
    return ", ".join(parts)


def _table(rows: list[dict[str, Any]]) -> Table:
    table = FitTable("key", "limits", "running", "waiting", "started (window)", "oldest waiting", "paused", "set by")
    for r in rows:
        paused = ""
        if r["paused"]:
            paused = "until lifted" if r["paused_until"] is None else f"until {r['paused_until']:.0f}"
        table.add_row(
            r["key"],
            _limit(r),
            str(r["running"]),
            str(r["waiting"]),
            str(r["started"]) if r["rate"] is not None else "",
            human_seconds(r["oldest_waiting"]),
            paused,
            r["source"],
        )
    return table


@flow_keys.command("list", epilog=EXIT_CODES)
@store_option
@format_option
def list_keys(store: str, fmt: str) -> None:
    """Every key: limits, steps running and waiting, starts in the current window, oldest waiter, pause."""
    rows = run_async(_rows(store, None))

    def render(console: Console) -> None:
        if not rows:
            console.print("no step flow-control keys yet (a key appears when a step first runs under it)")
            return
        console.print(_table(rows))

    emit(fmt, {"keys": rows}, render)


@flow_keys.command("show", epilog=EXIT_CODES)
@click.argument("key")
@store_option
@format_option
def show(key: str, store: str, fmt: str) -> None:
    """One key: its limits in force, where they come from, and what it holds now."""
    rows = run_async(_rows(store, key))
    if not rows:
        raise LockgateError(f"no step flow-control key {key!r} (see 'lockgate flow-keys list')")
    row = rows[0]

    def render(console: Console) -> None:
        console.print(_table(rows))
        if row.get("weighted"):
            console.print(
                f"units in the window: {row['units_reserved']} reserved, {row['units_settled']} settled, "
                f"{row['units_available']} available of {row['rate']}"
            )
        if row["paused"]:
            console.print(f"paused: {row['pause_reason'] or 'by hand'} (lift with 'lockgate workflows unpause-key')")

    emit(fmt, row, render)


@flow_keys.command("set", epilog=EXIT_CODES)
@click.argument("key")
@click.option("--rate", type=LimitType(), default=_KEEP, help="Steps that may start per period ('none': no rate).")
@click.option("--period", type=DurationType(), default=None, help="The rate's sliding window (e.g. 1s, 1m).")
@click.option("--parallelism", type=LimitType(), default=_KEEP, help="Steps that may run at once ('none': no cap).")
@store_option
@format_option
def set_key(key: str, rate: Any, period: float | None, parallelism: Any, store: str, fmt: str) -> None:
    """Set KEY's limits; options not given keep their current value. Waiting steps see them at once.

    Limits set here stand until set again: a declaration in code no longer changes them.
    """

    async def go() -> dict[str, Any]:
        async with open_client(load_app(None), store) as client:
            current = await client.flow_keys(key)
            base: dict[str, Any] = {"rate": None, "period": 1.0, "parallelism": None}
            if current:
                base = current[0].to_dict()
            row = await client.set_flow_limits(
                key,
                rate=base["rate"] if rate is _KEEP else rate,
                period=base["period"] if period is None else period,
                parallelism=base["parallelism"] if parallelism is _KEEP else parallelism,
            )
            return row.to_dict()

    row = run_async(go())

    def render(console: Console) -> None:
        console.print(f"{key}: {_limit(row)} (waiting steps see it now)")

    emit(fmt, row, render)
