"""The deploy-time replay check, on real journals written by an earlier edition of the same workflow."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from lockgate.crypto import Keyring, generate_key
from lockgate.engine.replay_check import JournalExport, ReplayVerdict, check_export
from lockgate.errors import InvalidArgument
from lockgate.inspect import connect
from lockgate.testing import replay_check

from .apps import replay_shapes as shapes
from .apps.waits import eventually

ROOT = Path(__file__).resolve().parent.parent


async def _parked(engine: lg.Engine, run_id: str, waiting_on: str) -> bool:
    run = await engine.get_run(run_id)
    return run.status == "running" and run.waiting_on == waiting_on and run.owner is None


async def _old_runs(engine: lg.Engine) -> dict[str, str]:
    """A run of ``shaped`` parked on its signal, one of ``fan`` parked on its timer, and one that ended."""
    parked = (await engine.start("shaped", {"tag": "live"})).run_id
    fan = (await engine.start("fan", {"tag": "fan"})).run_id
    ended = (await engine.start("shaped", {"tag": "ended"})).run_id
    assert parked and fan and ended
    await eventually(lambda: _parked(engine, parked, "signal"), what="shaped parked")
    await eventually(lambda: _parked(engine, fan, "timer"), what="fan parked")
    await eventually(lambda: _parked(engine, ended, "signal"), what="second shaped parked")
    await engine.signal(ended, "go", {})
    assert await engine.result(ended, timeout=30) == "a+b+go+c"
    return {"parked": parked, "fan": fan, "ended": ended}


async def _verdicts(store_url: str, app: lg.App, **options: Any) -> dict[str, ReplayVerdict]:
    async with connect(store_url, app) as inspector:
        report = await inspector.replay_check(**options)
    return {v.run_id: v for v in report.verdicts}


async def test_the_check_finds_each_edit_of_a_live_run(make_engine: Any, store_url: str) -> None:
    async with make_engine(shapes.old) as engine:
        ids = await _old_runs(engine)
        steps_before = [s.key for s in await engine.steps(ids["parked"])]

    unchanged = await _verdicts(store_url, shapes.unchanged)
    assert unchanged[ids["parked"]].outcome == "compatible"
    assert unchanged[ids["parked"]].replayed == 2
    assert unchanged[ids["fan"]].outcome == "compatible"  # parallel steps and a pending timer
    assert ids["ended"] not in unchanged  # ended runs only when asked for

    inserted = (await _verdicts(store_url, shapes.inserted))[ids["parked"]]
    assert (inserted.outcome, inserted.position, inserted.recorded, inserted.requested) == (
        "nondeterministic",
        1,
        "b#0",
        "x#0",
    )
    removed = (await _verdicts(store_url, shapes.removed))[ids["parked"]]
    assert (removed.outcome, removed.position, removed.recorded, removed.requested) == (
        "nondeterministic",
        1,
        "b#0",
        "signal:go#0",
    )
    reordered = (await _verdicts(store_url, shapes.reordered))[ids["parked"]]
    assert (reordered.outcome, reordered.position, reordered.recorded, reordered.requested) == (
        "nondeterministic",
        0,
        "a#0",
        "b#0",
    )
    bumped = (await _verdicts(store_url, shapes.bumped))[ids["parked"]]
    assert (bumped.outcome, bumped.version, bumped.compatible_with) == ("version-incompatible", "1", ("2",))
    assert bumped.breaks
    assert (await _verdicts(store_url, shapes.fanned))[ids["parked"]].outcome == "compatible"

    async with make_engine(shapes.old) as engine:  # nothing was written by any check
        assert [s.key for s in await engine.steps(ids["parked"])] == steps_before
        run = await engine.get_run(ids["parked"])
        assert run.status == "running" and run.waiting_on == "signal"


async def test_ended_runs_are_checked_when_asked_and_do_not_count_as_breaking(make_engine: Any, store_url: str) -> None:
    async with make_engine(shapes.old) as engine:
        ids = await _old_runs(engine)
    async with connect(store_url, shapes.reordered) as inspector:
        report = await inspector.replay_check(include_ended=True, workflow="shaped")
    found = {v.run_id: v for v in report.verdicts}
    assert ids["fan"] not in found  # another workflow
    assert found[ids["ended"]].outcome == "nondeterministic"
    assert [v.run_id for v in report.breaking] == [ids["parked"]]
    async with connect(store_url, shapes.unchanged) as inspector:
        ended = (await inspector.replay_check(include_ended=True, workflow="shaped")).to_dict()
    assert ended["breaking"] == 0 and ended["outcomes"] == {"compatible": 2}


async def test_an_exported_journal_replays_in_a_test_suite(make_engine: Any, store_url: str, tmp_path: Path) -> None:
    async with make_engine(shapes.old) as engine:
        ids = await _old_runs(engine)
    async with connect(store_url) as inspector:
        export = await inspector.export_run(ids["parked"])
    path = tmp_path / "journal.json"
    path.write_text(export.to_json())
    assert not (await replay_check(shapes.unchanged, path)).breaks
    assert not (await replay_check(shapes.unchanged, str(path))).breaks
    verdict = await replay_check(shapes.inserted, path.read_text())
    assert verdict.breaks and verdict.requested == "x#0"
    other = lg.App()

    @other.workflow(name="something-else")
    async def something_else(ctx: lg.Context, p: shapes.Job) -> None:
        return None

    assert (await replay_check(other, export)).outcome == "unregistered"


async def test_a_body_that_raises_on_replay_is_reported(make_engine: Any, store_url: str) -> None:
    async with make_engine(shapes.old) as engine:
        ids = await _old_runs(engine)
    broken = lg.App()

    @broken.workflow(name="shaped", version="1")
    async def shaped(ctx: lg.Context, p: shapes.Job) -> str:
        await ctx.step("a", shapes.act, "a")
        if p.tag == "live":
            await ctx.step("b", shapes.act, "b")
        raise KeyError("gone")

    async with connect(store_url, broken) as inspector:
        verdicts = {v.run_id: v for v in (await inspector.replay_check(include_ended=True)).verdicts}
    fails = verdicts[ids["parked"]]  # it follows the journal, then raises where the run would go on
    assert (fails.outcome, fails.detail) == ("fails", "KeyError: 'gone'")
    stops = verdicts[ids["ended"]]  # it stops after a: b is recorded and never asked for
    assert (stops.outcome, stops.recorded, stops.requested) == ("nondeterministic", "b#0", None)


@pytest.mark.parametrize("limit", [1, None])
async def test_the_runtime_tripwire_is_off_past_the_replay_shape_limit(make_engine: Any, limit: int | None) -> None:
    async with make_engine(shapes.old) as engine:
        run_id = (await engine.start("shaped", {"tag": "live"})).run_id
        assert run_id is not None
        await eventually(lambda: _parked(engine, run_id, "signal"), what="parked")
    options = {} if limit is None else {"replay_shape_limit": limit}
    async with make_engine(shapes.removed, **options) as engine:  # b#0 is recorded and no longer reached
        await engine.signal(run_id, "go", {})
        assert await engine.result(run_id, timeout=30) == "a+go+c"
        events = [e.type for e in await engine.events(run_id)]
    assert ("nondeterminism-suspected" in events) is (limit is None)


def test_a_bad_replay_shape_limit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="replay_shape_limit"):
        lg.Engine(shapes.old, f"sqlite:///{tmp_path}/x.db", replay_shape_limit=-1)


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"format": "other"}', '{"format": "lockgate.journal/1", "run": {}, "journal": []}'],
)
def test_a_bad_export_is_refused(text: str) -> None:
    with pytest.raises(InvalidArgument, match="journal"):
        JournalExport.from_json(text, source="journal.json")


@pytest.mark.slow
def test_the_cli_checks_a_store_and_an_exported_file(tmp_path: Path, store_url: str) -> None:
    """``lockgate workflows export`` writes what ``lockgate check --journal`` reads; exit 1 when a live run breaks."""

    async def prepare() -> str:
        async with lg.Engine(shapes.old, store_url, poll_interval=0.05, lease="2s") as engine:
            return (await _old_runs(engine))["parked"]

    parked = asyncio.run(prepare())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOCKGATE_STORE": store_url, "COLUMNS": "200"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "lockgate.cli", *args]
        return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)

    ok = cli("check", "tests.apps.replay_shapes:unchanged", "--format", "json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["breaking"] == 0
    bad = cli("check", "tests.apps.replay_shapes:inserted")
    assert bad.returncode == 1, bad.stderr
    assert "nondeterministic" in bad.stdout and "x#0" in bad.stdout and "would break" in bad.stdout
    path = tmp_path / "run.json"
    exported = cli("workflows", "export", parked, "-o", str(path))
    assert exported.returncode == 0, exported.stderr
    from_file = cli("check", "tests.apps.replay_shapes:reordered", "--journal", str(path), "--format", "json")
    assert from_file.returncode == 1
    (verdict,) = json.loads(from_file.stdout)["runs"]
    assert (verdict["run_id"], verdict["recorded"], verdict["requested"]) == (parked, "a#0", "b#0")
    missing = cli("workflows", "export", "run_nope")
    assert missing.returncode == 1 and "run_nope" in missing.stderr


async def test_a_sealed_journal_replays_with_its_key_and_is_undecidable_without(
    make_engine: Any, store_url: str
) -> None:
    key = generate_key()
    sealed = lg.App()

    @sealed.workflow(name="sealed", encrypt_steps=True)
    async def sealed_body(ctx: lg.Context, p: shapes.Job) -> str:
        secret = await ctx.step("secret", shapes.act, p.tag)
        await ctx.wait_for_signal("go", shapes.Go)
        return str(secret)

    async with make_engine(sealed, encryption_keys=[key]) as engine:
        run_id = (await engine.start("sealed", {"tag": "classified"})).run_id
        assert run_id is not None
        await eventually(lambda: _parked(engine, run_id, "signal"), what="sealed run parked")
    async with connect(store_url, keyring=Keyring()) as inspector:
        export = await inspector.export_run(run_id)
    assert "classified" not in export.to_json()  # exported as stored: sealed
    assert (await check_export(sealed, export, keyring=Keyring.load([key]))).outcome == "compatible"
    blind = await check_export(sealed, export, keyring=Keyring())
    assert blind.outcome == "undecidable" and blind.breaks
