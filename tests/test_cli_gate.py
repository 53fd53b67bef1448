"""The gate and bulk commands of the ``lockgate`` CLI (one test runs them as real processes).

State is prepared through the CLI itself, a ``lockgate serve`` process, or an in-test
``TestEnv`` on the same store (closed before the CLI reads it); assertions read the
``--format json`` documents.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from .apps.cli_gate import app as gate_app
from .test_cli import Lockgate, migrated, wait_for

pytestmark = pytest.mark.slow

APP = "tests.apps.cli_gate:app"
OTHER_APP = "tests.apps.cli_gate:other"
ROOT = Path(__file__).resolve().parent.parent

FLOW_KEYS = {
    "workflow",
    "key",
    "queued",
    "waiting",
    "in_flight",
    "admitted",
    "collapsed",
    "batched",
    "dropped",
    "skipped",
    "expired",
    "existing",
    "modes",
    "sources",
    "flow_waiting",
}


def make_cli(store: str, cwd: Path) -> Lockgate:
    cli = Lockgate(store, cwd, app=APP)
    cli.env["PYTHONPATH"] = os.pathsep.join((str(ROOT), cli.env["PYTHONPATH"]))
    return cli


@pytest.fixture
def lg(store_url: str, tmp_path: Path) -> Lockgate:
    """The CLI with the gate test app importable, on each kind of store."""
    return make_cli(migrated(store_url), tmp_path)


@pytest.fixture
def cli(tmp_path: Path) -> Lockgate:
    """The CLI on a SQLite file, for usage errors (they never reach a store)."""
    return make_cli(f"sqlite:///{tmp_path}/lockgate.db", tmp_path)


def start(lg: Lockgate, workflow: str, **payload: Any) -> dict[str, Any]:
    """``workflows start``: the handle as JSON (started, queued, ...)."""
    handle: dict[str, Any] = lg.json("workflows", "start", workflow, "--app", APP, "--payload", json.dumps(payload))
    return handle


def runs(lg: Lockgate, workflow: str) -> dict[str, dict[str, Any]]:
    """Every run of ``workflow`` by id (one ``workflows list``)."""
    return {r["id"]: r for r in lg.json("workflows", "list", "--workflow", workflow, "--limit", "1000")["runs"]}


def wait_runs(lg: Lockgate, workflow: str, status: str, count: int) -> dict[str, dict[str, Any]]:
    """Wait until ``workflow`` has ``count`` runs, all in ``status``."""
    found: dict[str, dict[str, Any]] = wait_for(
        lambda: runs(lg, workflow),
        lambda rs: len(rs) == count and {r["status"] for r in rs.values()} == {status},
        f"{count} {status} run(s) of {workflow}",
    )
    return found


def flow_rows(lg: Lockgate, *args: str) -> dict[str, dict[str, Any]]:
    """``workflows flow`` rows by key."""
    document = lg.json("workflows", "flow", *args)
    return {row["key"]: row for row in document["flow"]}


# -- flow ---------------------------------------------------------------------------------------


async def test_flow_counts_a_debounce_burst(lg: Lockgate, env_factory: Any) -> None:
    async with env_factory(gate_app) as env:
        for n in range(5):
            assert (await env.engine.start("cg.debounced", {"key": "row-1", "n": n})).status == "queued"
        for n in range(2):
            await env.engine.start("cg.debounced", {"key": "row-2", "n": n})
        await env.settle()

    document = lg.json("workflows", "flow", "--workflow", "cg.debounced")
    assert (document["workflow"], document["since"]) == ("cg.debounced", None)
    rows = {row["key"]: row for row in document["flow"]}
    assert sorted(rows) == ["row-1", "row-2"]
    for row in rows.values():
        assert set(row) == FLOW_KEYS
        assert isinstance(row["waiting"], float) and row["waiting"] >= 0
    one, two = rows["row-1"], rows["row-2"]
    assert (one["queued"], one["collapsed"], one["admitted"], one["modes"]) == (1, 4, 0, {"debounce": 1})
    assert (two["queued"], two["collapsed"]) == (1, 1)

    recent = flow_rows(lg, "--workflow", "cg.debounced", "--since", "1h")
    assert (recent["row-1"]["collapsed"], recent["row-2"]["collapsed"]) == (4, 1)
    assert lg.json("workflows", "flow", "--since", "1h")["since"] is not None
    assert lg.json("workflows", "flow", "--workflow", "cg.plain")["flow"] == []

    table = lg("workflows", "flow").out
    assert "row-1" in table and "collapsed" in table and "waiting=" in table and "debounce" in table


# -- why ----------------------------------------------------------------------------------------


async def test_why_follows_a_collapsed_start_to_its_run(lg: Lockgate, env_factory: Any) -> None:
    async with env_factory(gate_app) as env:
        handles = [await env.engine.start("cg.debounced", {"key": "r", "n": n}) for n in range(3)]
        await env.advance("2h")  # past the debounce period: the folded row is admitted and runs
        await env.engine.drainer.tick()
        await env.settle()
        (run,) = await env.engine.list_runs(workflow="cg.debounced")
        assert (run.status, run.output) == ("succeeded", 2)

    first, folded = handles[0].ticket, handles[1].ticket
    why = lg.json("workflows", "why", folded)
    assert (why["ticket"], why["workflow"], why["outcome"]) == (folded, "cg.debounced", "collapsed")
    assert why["absorbed_by"] == first
    assert (why["run_id"], why["run_status"], why["state"]) == (run.id, "succeeded", "succeeded")
    assert ("arrival", "collapsed") in [(h["kind"], h["outcome"]) for h in why["history"]]
    admitted = [h for h in why["history"] if h["kind"] == "drain" and h["outcome"] == "admitted"]
    assert len(admitted) == 1 and admitted[0]["run_id"] == run.id and admitted[0]["folded"] == 3

    own = lg.json("workflows", "why", first)
    assert (own["outcome"], own["absorbed_by"], own["run_id"]) == ("queued", None, run.id)

    table = lg("workflows", "why", folded).out
    assert f"folded into start {first}" in table and f"became run {run.id}, now succeeded" in table


def test_why_places_a_queued_concurrency_start(lg: Lockgate) -> None:
    lg = lg.real()  # this file's commands as processes of their own
    admitted = start(lg, "cg.limited", key="k", n=1)
    queued = start(lg, "cg.limited", key="k", n=2)
    behind = start(lg, "cg.limited", key="k", n=3)
    assert (admitted["status"], queued["status"], behind["status"]) == ("started", "queued", "queued")
    assert queued["deferral"]["mode"] == "concurrency"

    why = lg.json("workflows", "why", queued["ticket"], "--app", APP)
    assert (why["state"], why["control"], why["key"], why["position"]) == ("parked", "concurrency", "k", 0)
    assert why["run_id"] is None and why["absorbed_by"] is None
    assert [(h["kind"], h["outcome"]) for h in why["history"]] == [("arrival", "queued")]
    assert lg.json("workflows", "why", behind["ticket"])["position"] == 1

    running = lg.json("workflows", "why", admitted["ticket"])
    assert (running["outcome"], running["state"], running["run_id"]) == ("admitted", "running", admitted["run_id"])

    table = lg("workflows", "why", queued["ticket"]).out
    assert "is parked by concurrency under key 'k', position 0" in table

    unknown = lg("workflows", "why", "tkt_nope", code=1)
    assert unknown.err.strip() == "error: no arrival with ticket 'tkt_nope'"
    assert unknown.out == ""


# -- pauses -------------------------------------------------------------------------------------


def test_pause_parks_starts_until_unpause_releases_them(lg: Lockgate) -> None:
    with lg.serving():
        paused = lg.json("workflows", "pause", "cg.plain", "--reason", "deploying", "--app", APP)
        assert paused == {"verb": "pause", "workflow": "cg.plain", "reason": "deploying"}
        (entry,) = lg.json("workflows", "pauses")["pauses"]
        assert (entry["kind"], entry["name"], entry["reason"], entry["until"]) == (
            "workflow",
            "cg.plain",
            "deploying",
            None,
        )

        handle = start(lg, "cg.plain", n=21)
        assert (handle["status"], handle["run_id"], handle["deferral"]["mode"]) == ("queued", None, "paused")
        why = lg.json("workflows", "why", handle["ticket"])
        assert (why["state"], why["control"]) == ("parked", "paused")
        stats = lg.json("workflows", "stats", "--workflow", "cg.plain")
        assert stats["workflows"][0]["parked"] == {"paused": 1}
        assert stats["workflows"][0]["runs"]["total"] == 0
        assert "admitted when the workflow is unpaused" in lg("workflows", "why", handle["ticket"]).out

        unpaused = lg.json("workflows", "unpause", "cg.plain")
        assert unpaused == {"verb": "unpause", "workflow": "cg.plain", "was_paused": True, "released": 1}
        assert lg.json("workflows", "pauses")["pauses"] == []

        done = wait_for(
            lambda: lg.json("workflows", "why", handle["ticket"]),
            lambda t: t["state"] == "succeeded",
            "the released start runs",
        )
        assert lg.run(done["run_id"])["output"] == 42
        assert ("drain", "released") in [(h["kind"], h["outcome"]) for h in done["history"]]

    again = lg.json("workflows", "unpause", "cg.plain")
    assert (again["was_paused"], again["released"]) == (False, 0)
    assert "was not paused" in lg("workflows", "unpause", "cg.plain").out
    refused = lg("workflows", "pause", "cg.nope", "--app", APP, code=1)
    assert refused.err.startswith("error: unknown workflow 'cg.nope'")


def test_pause_key_holds_admissions_under_that_key(lg: Lockgate) -> None:
    if lg.store.startswith("sqlite"):  # like every command, a pause needs an existing store
        missing = lg("workflows", "pause-key", "k", "--store", f"sqlite:///{lg.cwd}/missing.db", code=1)
        assert missing.err.startswith("error: no lockgate database at ")
    assert start(lg, "cg.limited", key="other")["status"] == "started"
    held = lg.json("workflows", "pause-key", "k", "--for", "1h", "--reason", "provider says wait")
    assert (held["key"], held["reason"]) == ("k", "provider says wait") and held["until"] is not None
    (entry,) = lg.json("workflows", "pauses")["pauses"]
    assert (entry["kind"], entry["name"], entry["until"]) == ("key", "k", held["until"])

    handle = start(lg, "cg.limited", key="k")
    assert (handle["status"], handle["deferral"]["mode"]) == ("queued", "key-paused")
    why = lg.json("workflows", "why", handle["ticket"])
    assert (why["state"], why["control"], why["key"]) == ("parked", "key-paused", "k")
    assert start(lg, "cg.limited", key="free")["status"] == "started"  # another key is not held

    assert lg.json("workflows", "unpause-key", "k") == {"verb": "unpause-key", "key": "k", "was_paused": True}
    assert lg.json("workflows", "pauses")["pauses"] == []
    assert lg.json("workflows", "unpause-key", "k")["was_paused"] is False

    until = lg.json("workflows", "pause-key", "pool-a", "--until", "2999-01-01T00:00:00")
    assert until["until"] == "2999-01-01T00:00:00+00:00"
    forever = lg.json("workflows", "pause-key", "pool-b")
    assert forever["until"] is None
    assert sorted(p["name"] for p in lg.json("workflows", "pauses")["pauses"]) == ["pool-a", "pool-b"]


# -- bulk verbs ---------------------------------------------------------------------------------


def test_cancel_many_is_a_dry_run_until_committed(lg: Lockgate) -> None:
    ids = [start(lg, "cg.held", n=n)["run_id"] for n in range(3)]
    other = start(lg, "cg.limited", key="x")["run_id"]

    dry = lg.json("workflows", "cancel-many", "--limit", "2", "--reason", "bad deploy", "--workflow", "cg.held")
    assert (dry["verb"], dry["committed"], dry["truncated"], dry["limit"]) == ("cancel", False, True, 2)
    assert [(i["run_id"], i["outcome"]) for i in dry["items"]] == [(ids[0], "would-act"), (ids[1], "would-act")]
    assert dry["counts"] == {"succeeded": 0, "failed": 0, "skipped": 0, "would-act": 2}
    table = lg("workflows", "cancel-many", "--limit", "2", "--reason", "bad deploy").out
    assert "dry run: nothing changed; add --commit" in table and "truncated" in table
    assert {r["status"] for r in runs(lg, "cg.held").values()} == {"running"}

    done = lg.json(
        "workflows", "cancel-many", "--limit", "5", "--reason", "bad deploy", "--workflow", "cg.held", "--commit"
    )
    assert (done["committed"], done["truncated"]) == (True, False)
    assert sorted(i["run_id"] for i in done["items"] if i["outcome"] == "succeeded") == sorted(ids)
    assert {(r["status"], r["error_message"]) for r in runs(lg, "cg.held").values()} == {("cancelled", "bad deploy")}
    assert runs(lg, "cg.limited")[other]["status"] == "running"
    assert lg.json("workflows", "cancel-many", "--limit", "5", "--reason", "x", "--workflow", "cg.held")["items"] == []

    skipped = lg.json("workflows", "cancel-many", "--limit", "5", "--reason", "x", "--status", "cancelled")
    assert {i["outcome"] for i in skipped["items"]} == {"skipped"}
    assert skipped["items"][0]["reason"] == "cancel does not apply to a cancelled run"

    stats = lg.json("workflows", "stats")
    by_workflow = {e["workflow"]: e for e in stats["workflows"]}
    assert by_workflow["cg.held"]["runs"] == {
        "running": 0,
        "suspended": 0,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 3,
        "total": 3,
    }
    assert by_workflow["cg.limited"]["runs"]["running"] == 1
    assert stats["totals"]["runs"]["total"] == 4 and stats["totals"]["parked_total"] == 0


def test_replay_many_redrives_failed_runs(lg: Lockgate, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    ids = [start(lg, "cg.gated", marker=str(marker))["run_id"] for _ in range(2)]
    with lg.serving():
        failed = wait_runs(lg, "cg.gated", "failed", 2)
        assert sorted(failed) == sorted(ids) and {r["error_tag"] for r in failed.values()} == {"RuntimeError"}

        dry = lg.json("workflows", "replay-many", "--mode", "redrive", "--limit", "10")
        assert (dry["verb"], dry["committed"], dry["truncated"]) == ("redrive", False, False)
        assert sorted(i["run_id"] for i in dry["items"] if i["outcome"] == "would-act") == sorted(ids)
        dry_table = lg("workflows", "replay-many", "--mode", "redrive", "--limit", "10").out
        assert "dry run: nothing changed; add --commit" in dry_table
        assert {r["status"] for r in runs(lg, "cg.gated").values()} == {"failed"}

        # a retry through an app that does not register the workflow fails per run, and the command exits 1
        retry = ["--mode", "retry", "--limit", "10", "--app", OTHER_APP, "--commit", "--format", "json"]
        refused = lg("workflows", "replay-many", *retry, code=1)
        assert refused.json["counts"]["failed"] == 2
        assert all("unknown workflow 'cg.gated'" in (i["reason"] or "") for i in refused.json["items"])
        assert refused.err.strip() == "error: 2 of 2 run(s) could not be retried (see the results above)"

        marker.write_text("go")
        done = lg.json("workflows", "replay-many", "--mode", "redrive", "--limit", "10", "--commit")
        assert sorted(i["run_id"] for i in done["items"] if i["outcome"] == "succeeded") == sorted(ids)
        assert {r["output"] for r in wait_runs(lg, "cg.gated", "succeeded", 2).values()} == {"ok"}

    skipped = lg.json("workflows", "replay-many", "--mode", "redrive", "--limit", "10", "--status", "succeeded")
    assert [i["outcome"] for i in skipped["items"]] == ["skipped", "skipped"]
    assert skipped["items"][0]["reason"] == "redrive does not apply to a succeeded run"
    assert lg.json("workflows", "stats", "--workflow", "cg.gated")["totals"]["runs"]["succeeded"] == 2


# -- usage --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["workflows", "cancel-many", "--reason", "x"], "Missing option '--limit'"),
        (["workflows", "cancel-many", "--limit", "5"], "Missing option '--reason'"),
        (["workflows", "cancel-many", "--limit", "5", "--reason", " "], "the reason must not be empty"),
        (["workflows", "cancel-many", "--limit", "0", "--reason", "x"], "--limit"),
        (["workflows", "cancel-many", "--limit", "5", "--reason", "x", "--status", "sleeping"], "'sleeping' is not"),
        (["workflows", "replay-many", "--limit", "5"], "Missing option '--mode'"),
        (["workflows", "replay-many", "--mode", "redrive"], "Missing option '--limit'"),
        (["workflows", "replay-many", "--mode", "rerun", "--limit", "5"], "'rerun' is not one of"),
        (["workflows", "replay-many", "--mode", "retry", "--limit", "5"], "--mode retry needs --app"),
        (["workflows", "flow", "--since", "lately"], "cannot read 'lately'"),
        (["workflows", "why"], "Missing argument 'TICKET'"),
        (["workflows", "pause-key", "k", "--for", "1h", "--until", "2999-01-01"], "--until or --for, not both"),
        (["workflows", "pause-key", "k", "--until", "2000-01-01T00:00:00Z"], "is not in the future"),
        (["workflows", "pause-key", "k", "--until", "tomorrow"], "not an ISO 8601 time"),
        (["workflows", "pause-key", ""], "the key must not be empty"),
    ],
)
def test_bad_arguments_exit_2(cli: Lockgate, args: list[str], needle: str) -> None:
    result = cli(*args, code=2)
    assert result.err.startswith("error: ") and needle in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1
    assert result.out == ""
    assert not (cli.cwd / "lockgate.db").exists()


def test_help_of_each_command_documents_exit_codes(cli: Lockgate) -> None:
    commands = "flow why pause unpause pause-key unpause-key pauses cancel-many replay-many stats"
    for command in commands.split():
        assert "Exit codes:" in cli("workflows", command, "--help").out, command
