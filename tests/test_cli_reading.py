"""What a person reads: `workflows pending`, `workflows show` (positions, a child's output), 80 columns."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.cli import run
from lockgate.cli.demo import RunRow, table
from lockgate.cli.output import make_console, steps_table
from lockgate.inspect import RunDetail
from lockgate.records import StepInfo


class Edit(BaseModel):
    row: str
    n: int


class Total(BaseModel):
    total: int
    label: str


def _app() -> lg.App:
    app = lg.App()

    @app.workflow(name="edits.apply", debounce=lg.Debounce(key=lambda p: p.row, period="15m"))
    async def apply(ctx: lg.Context, p: Edit) -> int:
        return p.n

    @app.workflow(name="kid")
    async def kid(ctx: lg.Context, p: Edit) -> Total:
        return Total(total=p.n * 2, label="k")

    @app.workflow(name="parent")
    async def parent(ctx: lg.Context, p: Edit) -> int:
        await ctx.sleep("nap", 0)
        child = await ctx.start_child("kid", {"row": p.row, "n": p.n})
        done = await ctx.wait_child(child)
        return int(done.total)

    return app


def lockgate(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def columns_80() -> Iterator[None]:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    yield
    if before is None:
        del os.environ["COLUMNS"]
    else:
        os.environ["COLUMNS"] = before


def test_pending_lists_parked_starts_with_their_tickets(store_url: str, columns_80: None) -> None:
    async def starts() -> list[lg.RunHandle]:
        async with lg.Client(_app(), store_url) as client:
            return [
                await client.start("edits.apply", {"row": row, "n": n}) for row, n in (("r1", 1), ("r1", 2), ("r2", 3))
            ]

    first, second, other = asyncio.run(starts())
    code, out, err = lockgate("workflows", "pending", "--store", store_url, "--format", "json")
    assert code == 0, err
    pending = json.loads(out)["pending"]
    assert [(p["mode"], p["key"], p["folded"]) for p in pending] == [("debounce", "r1", 2), ("debounce", "r2", 1)]
    assert set(pending[0]["tickets"]) == {first.ticket, second.ticket}
    assert pending[1]["tickets"] == [other.ticket]
    code, out, _ = lockgate("workflows", "pending", "--store", store_url)
    assert code == 0 and all(len(line) <= 80 for line in out.splitlines())
    assert pending[0]["ticket"] in out  # whole: it is what `why` and `cancel-start` take
    code, out, _ = lockgate("workflows", "pending", "--store", store_url, "--workflow", "nothing")
    assert (code, out.strip()) == (0, "no start is parked at the gate")


def test_show_decodes_a_childs_output_once(store_url: str) -> None:
    async def go() -> tuple[str, RunDetail]:
        async with lg.Engine(_app(), store_url, poll_interval=0.05) as engine:
            handle = await engine.start("parent", {"row": "r", "n": 4})
            assert await handle.result(timeout=20) == 8
            assert handle.run_id is not None
            return handle.run_id, await engine.inspector.run_detail(handle.run_id)

    run_id, detail = asyncio.run(go())
    (waited,) = [s for s in detail.steps if s.kind == "wait_child"]
    assert isinstance(waited.output, dict) and waited.output["output"] == {"total": 8, "label": "k"}
    code, out, _ = lockgate("workflows", "show", run_id, "--store", store_url, "--format", "json")
    assert code == 0
    (shown,) = [s for s in json.loads(out)["steps"] if s["kind"] == "wait_child"]
    assert shown["output"]["output"] == {"total": 8, "label": "k"}


def test_show_lays_its_tables_out_for_80_columns(store_url: str, columns_80: None) -> None:
    async def go() -> str:
        async with lg.Engine(_app(), store_url, poll_interval=0.05) as engine:
            handle = await engine.start("parent", {"row": "r", "n": 4})
            assert await handle.result(timeout=20) == 8
            return handle.run_id or ""

    run_id = asyncio.run(go())
    code, out, err = lockgate("workflows", "show", run_id, "--store", store_url)
    assert code == 0, err
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert "nap#0" in out and "completed" in out  # keys and statuses whole; only long values are cut
    day = datetime.now(UTC).date().isoformat()
    assert any(line.startswith(f"journal (times UTC, {day})") for line in lines)
    assert "wait_child" in out and "succeeded" in out


def test_the_journal_table_numbers_entries_in_order_without_gaps() -> None:
    def entry(seq: int, key: str) -> StepInfo:
        row: dict[str, Any] = {
            "step_key": key, "kind": "step", "status": "completed", "seq": seq, "output": "1",
            "error_tag": None, "error_message": None, "attempts": 1, "due_at": None, "started_at": None,
            "finished_at": None,
        }  # fmt: skip
        return StepInfo.from_row(row)

    table = steps_table([entry(0, "a#0"), entry(2, "b#0"), entry(5, "c#0")])
    assert list(table.columns[0].cells) == ["1", "2", "3"]


def test_demo_table_fits_80_columns_with_short_unique_ids(tmp_path: Path, columns_80: None) -> None:
    rows = [
        RunRow("demo.checkout", f"run_06h4640reiqv6ao72gllirk{i}", "succeeded", None, 3, 1, "21:57:38 run-succeeded")
        for i in range(3)
    ]
    console = make_console()
    with console.capture() as captured:
        console.print(table(rows))
    text = captured.get()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert all(f"ao72gllirk{i}"[-8:] in text for i in range(3))
    assert text.count("│ succeeded ") == 3  # each status whole, in its own column
