"""``lockgate doctor``: a store's health report, judged finding by finding, on both stores."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.inspect import DoctorSettings, connect
from lockgate.sweeps.schedules import register, runtime_for

from .apps.waits import eventually

ROOT = Path(__file__).resolve().parent.parent


class Job(BaseModel):
    key: str


class Go(BaseModel):
    ok: bool = True


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="quick")
    async def quick(ctx: lg.Context, p: Job) -> str:
        return p.key

    @app.workflow(name="waits")
    async def waits(ctx: lg.Context, p: Job) -> str:
        await ctx.wait_for_signal("go", Go)
        return p.key

    @app.workflow(name="narrow", concurrency=lg.Concurrency(limit=1), timeouts=lg.Timeouts(start="1s"))
    async def narrow(ctx: lg.Context, p: Job) -> str:
        return p.key

    app.schedule("minutely", workflow="quick", cron="* * * * *", payload=lambda at: {"key": "tick"})
    return app


def tamper(store_url: str, sql: str, *params: Any) -> None:
    """Change the store behind lockgate's back: what a crash, a bug or a lost process leaves."""
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql, params)
    else:
        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]


def findings(report: Any) -> dict[str, Any]:
    return {f.check: f for f in report.findings}


async def test_a_healthy_store_needs_nobody(make_engine: Any, store_url: str) -> None:
    app = make_app()
    async with make_engine(app) as engine:
        assert await engine.run("quick", {"key": "a"}, timeout=30) == "a"
        async with connect(store_url, app) as inspector:
            report = await inspector.doctor()
    found = findings(report)
    assert not report.needs_person, report.to_dict()
    assert found["migrations"].status == "ok"
    assert found["workers"].status == "ok" and found["workers"].details[0]["state"] == "live"
    assert found["store_size"].details[0]["bytes"] > 0
    assert found["schedules"].status == "ok"
    assert found["clocks"].status == "ok"
    assert set(found) == {
        "migrations",
        "workers",
        "clocks",
        "routing",
        "stalled_runs",
        "crash_looped_runs",
        "parked_past_start_timeout",
        "orphaned_slots",
        "schedules",
        "retention",
        "store_size",
    }


async def test_work_with_nobody_to_run_it_needs_a_person(store_url: str) -> None:
    app = make_app()
    async with lg.Client(app, store_url) as client:  # executes nothing, runs no drainer
        await client.start("narrow", {"key": "first"})  # admitted: a run no worker takes
        parked = await client.start("narrow", {"key": "second"})  # behind the slot, timing out in 1s
        assert parked.status == "queued"
        await asyncio.sleep(1.2)
        async with connect(store_url, app) as inspector:
            report = await inspector.doctor(DoctorSettings(worker_grace=0))
    found = findings(report)
    assert report.needs_person
    assert found["workers"].status == "problem" and "no live worker" in found["workers"].summary
    overdue = found["parked_past_start_timeout"]
    assert overdue.status == "problem" and overdue.details[0]["workflow"] == "narrow"
    assert overdue.details[0]["parked"] == 1


async def test_stalled_crash_looped_orphaned_and_behind_are_problems(make_engine: Any, store_url: str) -> None:
    app = make_app()
    async with make_engine(app) as engine:
        waiting = (await engine.start("waits", {"key": "w"})).run_id
        ended = (await engine.start("narrow", {"key": "n"})).run_id
        assert waiting and ended
        await engine.result(ended, timeout=30)
        await eventually(lambda: _waits(engine, waiting), what="run waits on its signal")
        await register(runtime_for(engine.worker), orphan_others=True)  # the schedule's state row
    now = time.time()
    tamper(
        store_url,
        "UPDATE lockgate_runs SET status = 'suspended', error_tag = 'WorkflowCrashLooped' WHERE id = ?",
        ended,
    )
    tamper(
        store_url,
        "INSERT INTO lockgate_slots (run_id, scope, key, workflow, acquired_at)"
        " VALUES (?, 'wf:narrow', '', 'narrow', ?)",
        "run_gone",
        now,
    )
    tamper(store_url, "UPDATE lockgate_schedules SET watermark = ? WHERE name = 'minutely'", now - 3600)
    tamper(store_url, "UPDATE lockgate_runs SET progress_at = ? WHERE id = ?", now - 7200, waiting)
    async with connect(store_url, app) as inspector:
        report = await inspector.doctor(DoctorSettings(stall_after=60))
    found = findings(report)
    assert report.needs_person
    assert [d["run_id"] for d in found["stalled_runs"].details] == [waiting]
    assert [d["run_id"] for d in found["crash_looped_runs"].details] == [ended]
    assert [d["run_id"] for d in found["orphaned_slots"].details] == ["run_gone"]
    assert found["orphaned_slots"].details[0]["run"] is None
    assert found["schedules"].status == "problem" and found["schedules"].details[0]["schedule"] == "minutely"
    async with connect(store_url) as inspector:  # without the app, schedules cannot be judged
        assert findings(await inspector.doctor())["schedules"].status == "skipped"


async def test_a_dead_worker_holding_runs_and_a_retention_backlog(make_engine: Any, store_url: str) -> None:
    app = make_app()
    async with make_engine(app) as engine:
        done = (await engine.start("quick", {"key": "old"})).run_id
        assert done
        await engine.result(done, timeout=30)
        waiting = (await engine.start("waits", {"key": "held"})).run_id
        await eventually(lambda: _waits(engine, str(waiting)), what="run waits")
    now = time.time()
    tamper(
        store_url,
        "INSERT INTO lockgate_workers (id, host, pid, started_at, heartbeat_at) VALUES ('wkr_dead', 'h', 1, ?, ?)",
        now - 600,
        now - 600,
    )
    tamper(store_url, "UPDATE lockgate_runs SET owner = 'wkr_dead', lease_until = ? WHERE id = ?", now + 600, waiting)
    tamper(
        store_url,
        "UPDATE lockgate_runs SET created_at = ?, finished_at = ? WHERE id = ?",
        now - 90 * 86400,
        now - 90 * 86400,
        done,
    )
    async with connect(store_url, app) as inspector:
        report = await inspector.doctor()
    found = findings(report)
    assert found["workers"].status == "problem" and "hold 1 run" in found["workers"].summary
    assert found["retention"].status == "warn" and found["retention"].details[0]["runs"] == 1


async def _waits(engine: lg.Engine, run_id: str) -> bool:
    run = await engine.get_run(run_id)
    return run.waiting_on == "signal" and run.owner is None


@pytest.mark.slow
def test_the_cli_exits_non_zero_when_a_person_is_needed(store_url: str) -> None:
    app = make_app()

    async def prepare() -> None:
        async with lg.Client(app, store_url) as client:
            await client.start("quick", {"key": "nobody runs me"})

    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOCKGATE_STORE": store_url, "COLUMNS": "200"}

    def doctor(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "lockgate.cli", "doctor", *args]
        return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)

    asyncio.run(prepare())
    ok = doctor("--format", "json")  # the run is due for less than a minute: not yet a problem
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["needs_person"] is False
    tamper(store_url, "UPDATE lockgate_runs SET wake_at = ?", time.time() - 3600)
    bad = doctor()
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "no live worker" in bad.stdout and "something needs a person" in bad.stdout
    usage = doctor("--stall-after", "soon")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
