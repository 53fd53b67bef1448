"""Retention: what ended longer ago than ``Engine(retention=...)`` is forgotten, and nothing else."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

import lockgate as lg
from lockgate.cli import cli
from lockgate.store import gate, messages, workers
from lockgate.sweeps import sweeps_for
from lockgate.sweeps.retention import BATCH, Forgotten, forget_expired


class Job(BaseModel):
    n: int = 1


class Go(BaseModel):
    ok: bool = True


async def double(n: int) -> int:
    return n * 2


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="ret.steps")
    async def steps(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("double", double, p.n, input={"n": p.n}))

    @app.workflow(name="ret.waits")
    async def waits(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.n

    @app.workflow(name="ret.parent")
    async def parent(ctx: lg.Context, p: Job) -> int:
        child = await ctx.start_child("ret.steps", {"n": p.n})
        await ctx.wait_for_signal("go", Go)  # the child ends meanwhile; the parent has not read it yet
        return int(await ctx.wait_child(child))

    @app.workflow(name="ret.gated", concurrency=lg.Concurrency(limit=1))
    async def gated(ctx: lg.Context, p: Job) -> int:
        return p.n

    return app


async def _records(engine: lg.Engine, run_id: str) -> tuple[int, int, int, int]:
    return (
        len(await engine.steps(run_id)),
        len(await engine.attempts(run_id)),
        len(await engine.events(run_id)),
        len(await engine.store.read(messages.list_messages, run_id)),
    )


async def _pause_scopes(engine: lg.Engine) -> list[str]:
    await engine.refresh_pauses()
    return list(await engine.pause_snapshot())


async def _forgotten(engine: lg.Engine, run_id: str) -> bool:
    try:
        await engine.get_run(run_id)
    except lg.UnknownRun:
        return await _records(engine, run_id) == (0, 0, 0, 0)
    return False


async def test_runs_that_ended_before_the_retention_go_with_their_records_and_nothing_else(env_factory: Any) -> None:
    async with env_factory(make_app(), retention="1h") as env:
        engine = env.engine
        old = await engine.start("ret.steps", {"n": 1})
        assert await old.result(timeout=10) == 2
        assert (await _records(engine, old.run_id))[:3] == (1, 1, 2)  # its step, its attempt (an input), two events
        live = await engine.start("ret.waits", {"n": 2})
        await env.settle()
        await env.advance("2h")
        recent = await engine.start("ret.steps", {"n": 3})
        assert await recent.result(timeout=10) == 6
        forgotten = await forget_expired(engine.worker, engine.retention)
        assert (forgotten.runs, forgotten.workers) == (1, 0)
        assert forgotten.ledger_rows > 0  # the old arrivals' rows
        assert await _forgotten(engine, old.run_id)
        assert (await engine.get_run(recent.run_id)).status == "succeeded"
        assert (await _records(engine, recent.run_id))[:3] == (1, 1, 2)
        assert (await engine.get_run(live.run_id)).status == "running"  # live, however old
        await engine.signal(live.run_id, "go", {})
        assert await live.result(timeout=10) == 2
        assert await forget_expired(engine.worker, engine.retention) == Forgotten()  # the live run ended just now


async def test_a_child_stays_while_its_parent_may_still_wait_for_it(env_factory: Any) -> None:
    async with env_factory(make_app(), retention="1h") as env:
        engine = env.engine
        parent = await engine.start("ret.parent", {"n": 4})
        await env.settle()
        (child,) = [r for r in await engine.list_runs(workflow="ret.steps")]
        assert child.status == "succeeded"
        await env.advance("2h")
        assert (await forget_expired(engine.worker, engine.retention)).runs == 0
        await engine.signal(parent.run_id, "go", {})
        assert await parent.result(timeout=10) == 8  # read from the child kept for it
        assert (await _records(engine, parent.run_id))[3] == 1  # the signal it consumed
        await env.advance("2h")
        assert (await forget_expired(engine.worker, engine.retention)).runs == 2
        assert await _forgotten(engine, parent.run_id)
        assert await _forgotten(engine, child.id)


async def test_ledger_rows_older_than_the_retention_go_and_flow_counts_stay(env_factory: Any) -> None:
    async with env_factory(make_app(), retention="1h") as env:
        engine = env.engine
        handles = [await engine.start("ret.gated", {"n": i}) for i in range(3)]  # admitted as room frees
        await env.settle()
        assert handles[0].status == "started" and {h.status for h in handles} <= {"started", "queued"}
        before = {(r.workflow, r.key): r for r in await engine.flow(workflow="ret.gated")}
        assert sum(r.admitted for r in before.values()) == 3
        await env.advance("2h")
        fresh = await engine.start("ret.gated", {"n": 9})
        await env.settle()
        forgotten = await forget_expired(engine.worker, engine.retention)
        assert forgotten.runs == 3
        assert forgotten.ledger_rows >= 3  # the three arrivals, and the two drains of the parked ones
        assert await engine.trace(fresh.ticket) is not None
        after = {(r.workflow, r.key): r for r in await engine.flow(workflow="ret.gated")}
        assert sum(r.admitted for r in after.values()) == 4  # counted, though their rows are gone
        with pytest.raises(lg.LockgateError):
            await engine.trace(handles[0].ticket)


async def test_a_start_with_an_idempotency_key_starts_again_once_its_run_is_forgotten(env_factory: Any) -> None:
    async with env_factory(make_app(), retention="1h") as env:
        engine = env.engine
        first = await engine.start("ret.steps", {"n": 1}, idempotency_key="k")
        assert await first.result(timeout=10) == 2
        assert (await engine.start("ret.steps", {"n": 1}, idempotency_key="k")).run_id == first.run_id
        await env.advance("2h")
        await forget_expired(engine.worker, engine.retention)
        again = await engine.start("ret.steps", {"n": 1}, idempotency_key="k")
        assert again.run_id != first.run_id
        assert await again.result(timeout=10) == 2


async def test_workers_and_pauses_long_gone_are_forgotten(env_factory: Any) -> None:
    async with env_factory(make_app(), retention="1h") as env:
        engine = env.engine
        now = env.clock.now()
        await engine.store.write(workers.register_with_lease, "wkr-gone", "elsewhere", 1, now - 7200, 15.0)
        await engine.store.write(workers.stop_worker, "wkr-gone", now - 7200)
        await engine.store.write(gate.pause, "key:ended", None, now - 3 * 3600, now - 4 * 3600)
        await engine.store.write(gate.pause, "key:ends-later", None, now + 3600, now)
        await engine.pause("ret.gated")  # no end
        assert await forget_expired(engine.worker, engine.retention) == Forgotten(workers=1, pauses=1)
        assert sorted(await _pause_scopes(engine)) == ["key:ends-later", "wf:ret.gated"]
        ids = [w["id"] for w in await engine.store.read(workers.list_workers)]
        assert ids == [engine.worker_id]


async def test_a_backlog_larger_than_one_commit_s_batch_goes_in_one_tick(env_factory: Any) -> None:
    async with env_factory(make_app(), retention="1h") as env:
        engine = env.engine
        n = BATCH + 7
        handles = await asyncio.gather(*(engine.start("ret.steps", {"n": i}) for i in range(n)))
        for h in handles:
            await h.result(timeout=30)
        await env.advance("2h")
        assert (await forget_expired(engine.worker, engine.retention)).runs == n
        assert await engine.list_runs(workflow="ret.steps") == []


def test_bad_retention_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="retention must be at least 1m"):
        lg.Engine(make_app(), "sqlite:///unused.db", retention="10s")
    with pytest.raises(ValueError, match="retention"):
        lg.Engine(make_app(), "sqlite:///unused.db", retention="soon")
    result = CliRunner().invoke(cli, ["serve", "tests.apps.waits:app", "--retention", "5s"])
    assert result.exit_code == 2
    assert "--retention" in result.output and "at least 1m" in result.output


def test_retention_never_keeps_everything() -> None:
    engine = lg.Engine(make_app(), "sqlite:///unused.db", retention=None)
    # the schedule sweep runs whatever the app declares: schedules are also created at runtime
    assert [s.name for s in sweeps_for(engine.worker, engine.sweep_settings)] == ["staleness", "schedules", "routing"]
    with_retention = lg.Engine(make_app(), "sqlite:///unused.db")
    assert [s.name for s in sweeps_for(with_retention.worker, with_retention.sweep_settings)] == [
        "staleness",
        "retention",
        "schedules",
        "routing",
    ]
    assert with_retention.retention == 30 * 86400


async def test_one_replica_forgets_per_tick(make_engine: Any) -> None:
    async with make_engine(make_app(), retention="1h") as a, make_engine(make_app(), retention="1h") as b:
        (sweep_a,) = [s for s in sweeps_for(a.worker, a.sweep_settings) if s.name == "retention"]
        (sweep_b,) = [s for s in sweeps_for(b.worker, b.sweep_settings) if s.name == "retention"]
        assert [await sweep_a.run_once(a.worker), await sweep_b.run_once(b.worker)] == [True, False]
