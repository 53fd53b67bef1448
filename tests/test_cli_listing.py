"""Listing from the command line and over HTTP: the same query gives the same runs, pages, children
and hourly counts on both surfaces; ``--tail`` prints the last runs and ``--follow`` follows new
ones; a second discard says so."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import lockgate as lg
from lockgate.http import create_app
from lockgate.testing import TestEnv

from .test_cli import APP_SOURCE, Lockgate
from .test_listing import make_app, populate

pytestmark = pytest.mark.slow

API = "/api/v1"


@pytest.fixture
def lg_cli(store_url: str, tmp_path: Path) -> Lockgate:
    (tmp_path / "cliapp.py").write_text(APP_SOURCE)
    return Lockgate(store_url, tmp_path)


async def _api_get(store_url: str, path: str, params: dict[str, Any]) -> Any:
    async with lg.Client(lg.App(), store_url) as client:
        transport = httpx.ASGITransport(app=create_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            response = await http.get(f"{API}{path}", params=params)
            assert response.status_code == 200, response.text
            return response.json()


async def test_the_cli_and_the_api_answer_a_query_alike(
    env_factory: Callable[..., TestEnv], store_url: str, lg_cli: Lockgate
) -> None:
    async with env_factory(make_app(), start=float(int(time.time()) - 4 * 3600)) as env:
        everything = await populate(env)
    parent = next(r for r in everything if r.payload.get("note") == "parent")
    since = sorted(r.created_at for r in everything)[3].isoformat()
    queries: list[tuple[list[str], dict[str, Any], int]] = [  # (CLI flags, API parameters, page size)
        (["--statuses", "failed,succeeded"], {"status": "failed,succeeded"}, 3),
        (["--workflow", "alpha", "--since", since], {"workflow": "alpha", "since": since}, 2),
        (["--status", "failed", "--q", "apple"], {"status": "failed", "q": "apple"}, 50),
        (["--dead-letter", "--until", since], {"dead_letter": "true", "until": since}, 50),
        (["--id-prefix", everything[1].id[:16]], {"id_prefix": everything[1].id[:16]}, 50),
        (["--source", f"child:{parent.id}"], {"source": f"child:{parent.id}"}, 50),
    ]
    for args, params, size in queries:
        cursor_args: list[str] = []
        cursor_params: dict[str, Any] = {}
        while True:
            listed = lg_cli.json("workflows", "list", "--limit", str(size), *args, *cursor_args)
            page = await _api_get(store_url, "/runs", {**params, **cursor_params, "limit": size})
            assert [r["id"] for r in listed["runs"]] == [r["id"] for r in page["items"]], args
            assert [r["payload"] for r in listed["runs"]] == [r["payload"] for r in page["items"]]
            assert listed["next_cursor"] == page["next_cursor"]
            if page["next_cursor"] is None:
                break
            cursor_args, cursor_params = ["--cursor", page["next_cursor"]], {"cursor": page["next_cursor"]}

    kids = lg_cli.json("workflows", "children", parent.id)
    api_kids = await _api_get(store_url, f"/runs/{parent.id}/children", {})
    assert [r["id"] for r in kids["children"]] == [r["id"] for r in api_kids["items"]]
    assert len(kids["children"]) == 2
    assert "has no children" in lg_cli("workflows", "children", kids["children"][0]["id"]).out
    assert "no run with id 'run_nope'" in lg_cli("workflows", "children", "run_nope", code=1).err

    stats = lg_cli.json("workflows", "stats", "--hours", "6")["hourly"]
    api_stats = (await _api_get(store_url, "/stats", {"hours": 6}))["hourly"]
    for document in (stats, api_stats):
        document.pop("start")
    assert stats == api_stats
    assert stats["totals"]["total"] == 8 and len(stats["totals"]["started"]) == 6
    table = lg_cli("workflows", "stats", "--hours", "6").out
    assert "runs created per hour" in table and "alpha" in table and "(all)" in table
    assert any(ch in table for ch in "▁▂▃▄▅▆▇█")


async def test_a_second_discard_is_a_no_op_that_says_so(env_factory: Callable[..., TestEnv], lg_cli: Lockgate) -> None:
    async with env_factory(make_app()) as env:
        failed = await env.engine.start("alpha", {"note": "x", "fail": True})
        await env.settle()
        assert failed.run_id is not None
        assert await env.engine.discard(failed.run_id) is True
    again = lg_cli("workflows", "discard", failed.run_id, "--format", "json").json
    assert (again["already_discarded"], again["run"]["discarded"], again["run"]["status"]) == (True, True, "failed")
    assert "already discarded; nothing changed" in lg_cli("workflows", "discard", failed.run_id).out


def test_usage_errors_of_listing_never_reach_a_store(tmp_path: Path) -> None:
    (tmp_path / "cliapp.py").write_text(APP_SOURCE)
    cli = Lockgate(f"sqlite:///{tmp_path}/lockgate.db", tmp_path)
    for args, needle in (
        (["--statuses", "running,lost"], "lost"),
        (["--since", "whenever"], "neither an ISO 8601 time nor a duration"),
        (["--since", "1h", "--until", "2h"], "since must be before until"),
        (["--dead-letter", "--statuses", "failed,cancelled"], "dead letters are failed runs"),
        (["--id-prefix", ""], "id_prefix must not be empty"),
        (["--tail", "-1"], "--tail"),
    ):
        result = cli("workflows", "list", *args, code=2)
        assert needle in result.err and len(result.err.strip().splitlines()) == 1, result.err
    assert "--hours" in cli("workflows", "stats", "--hours", "0", code=2).err
    assert not (tmp_path / "lockgate.db").exists()


def test_tail_prints_the_last_runs_and_exits(lg_cli: Lockgate) -> None:
    lg_cli("migrate")  # a CLI start opens only a store that exists
    first = [lg_cli.start("double", {"n": n}) for n in range(3)]
    result = lg_cli("workflows", "list", "--tail", "2", "--format", "json")
    assert [json.loads(line)["id"] for line in result.out.splitlines()] == first[1:]  # the last two, oldest first
    lines = lg_cli("workflows", "list", "--tail", "5").out.strip().splitlines()
    assert len(lines) == 3 and all(run_id in "\n".join(lines) for run_id in first)
    assert lg_cli("workflows", "list", "--tail", "0").out.strip() == ""


def test_follow_shows_new_runs_until_interrupted(lg_cli: Lockgate) -> None:
    lg_cli("migrate")  # a CLI start opens only a store that exists
    first = [lg_cli.start("double", {"n": n}) for n in range(3)]
    proc = subprocess.Popen(
        lg_cli.argv("workflows", "list", "--tail", "2", "--follow", "--poll", "100ms", "--format", "json"),
        cwd=lg_cli.cwd,
        env=lg_cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a test worker may itself ignore SIGINT (a replaced xdist worker does): the child must not inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        shown = [json.loads(proc.stdout.readline())["id"] for _ in range(2)]
        assert shown == first[1:]  # the last two, oldest first
        later = [lg_cli.start("double", {"n": 10 + n}) for n in range(2)]
        followed = [json.loads(proc.stdout.readline())["id"] for _ in range(2)]
        assert followed == later
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
