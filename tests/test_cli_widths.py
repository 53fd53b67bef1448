"""Every table the command line prints reads at 80 and 100 columns: no line wider than the
terminal, no column squeezed to ``…`` or to nothing, the columns that identify a row whole."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest

from lockgate.cli import run

COLLAPSED = re.compile(r"^\S{0,4}…$")  # a cell cut to a stub: "…", "demo…", "succ…"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A store the demo filled (every kind of row a table shows), and the demo's own output at 80 columns."""
    folder = tmp_path_factory.mktemp("widths")
    url = f"sqlite:///{folder}/demo.db"
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "demo", "--store", url],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return url, done.stdout


def lockgate(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(list(argv))
    assert code == 0, err.getvalue()
    return out.getvalue()


def readable(out: str, width: int) -> None:
    lines = out.splitlines()
    wide = [line for line in lines if len(line) > width]
    assert not wide, "\n".join(wide)
    zero_width = ("┳┳", "╇╇", "┴┴", "┃┃", "││")  # two rules with no column between them
    assert not any(edge in line for line in lines for edge in zero_width), out
    cells = [cell.strip() for line in lines if line.startswith(("│", "┃")) for cell in re.split(r"[│┃]", line)]
    stubs = [cell for cell in cells if COLLAPSED.match(cell)]
    assert not stubs, f"collapsed cells {stubs}:\n{out}"


def test_the_demo_table_takes_a_line_a_run_at_80_columns(demo: tuple[str, str]) -> None:
    _, out = demo
    tables = re.split(r"^Database\b", re.split(r"^lockgate demo *$", out, flags=re.MULTILINE)[1], flags=re.MULTILINE)[0]
    readable(tables, 80)
    table = tables.strip("\n").split("\n\n", 1)[0].splitlines()
    rows = sum(1 for line in table if re.match(r"^│ demo\.", line))
    assert rows >= 18 and len(table) <= rows + 6, "\n".join(table)


@pytest.mark.parametrize("width", [80, 100])
def test_every_table_command_reads_at_this_width(
    demo: tuple[str, str], width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = demo
    monkeypatch.setenv("COLUMNS", str(width))
    runs = json.loads(lockgate("workflows", "list", "--store", url, "--format", "json"))["runs"]
    checkout = next(r for r in runs if r["workflow"] == "demo.checkout")
    narrate = next(r for r in runs if r["workflow"] == "demo.narrate")
    events = json.loads(lockgate("events", "list", "--store", url, "--format", "json"))["events"]
    commands = [
        ["workflows", "list"],
        ["workflows", "list", "--tail", "5"],
        ["workflows", "show", checkout["id"]],
        ["workflows", "children", checkout["id"]],
        ["workflows", "why", narrate["ticket"]],
        ["workflows", "flow"],
        ["workflows", "pending"],
        ["workflows", "pauses"],
        ["workflows", "stats"],
        ["schedules", "list", "--app", "lockgate.demo_app:app"],
        ["schedules", "firings", "demo.heartbeat"],
        ["events", "list"],
        ["events", "show", events[0]["id"]],
        ["events", "deliveries", events[0]["id"]],
        ["cluster", "status"],
        ["flow-keys", "list"],
    ]
    for argv in commands:
        out = lockgate(*argv, "--store", url)
        assert out.strip(), argv
        readable(out, width)
    readable(lockgate("schedules", "next", "demo.heartbeat", "--app", "lockgate.demo_app:app"), width)
    shown = lockgate("workflows", "show", checkout["id"], "--store", url)
    assert checkout["id"] in shown and "demo.checkout" in shown and "succeeded" in shown
    listed = lockgate("workflows", "list", "--store", url)
    assert checkout["id"] in listed and "demo.checkout" in listed  # the row's identity, whole
