"""The inspect layer: every read against both stores, its filters, its cursors, unknown ids."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.inspect import Inspector, RunDetail, connect, locate
from lockgate.testing import TestEnv

from .apps.gate import advance, wait_runs


class Job(BaseModel):
    tenant: str = "t"
    n: int = 0
    hold: bool = False
    fail: bool = False


class Go(BaseModel):
    ok: bool = True


def tenant(p: Job) -> str:
    return p.tenant


def boom(n: int) -> int:
    raise ValueError(f"job {n} cannot be done")


async def _body(ctx: lg.Context, p: Job) -> int:
    if p.hold:
        await ctx.wait_for_signal("go", Go)
    if p.fail:
        await ctx.step("boom", boom, p.n, retry=lg.Retry(max_attempts=1))
    return p.n


async def _parent(ctx: lg.Context, p: Job) -> int:
    child = await ctx.start_child("plain", {"n": p.n + 1})
    return int(await ctx.wait_child(child)) + p.n


def make_app() -> lg.App:
    app = lg.App()
    app.workflow(name="plain")(_body)
    app.workflow(name="parent")(_parent)
    app.workflow(name="gated", concurrency=lg.Concurrency(limit=1, key=tenant))(_body)
    app.workflow(name="folded", debounce=lg.Debounce(period="5m", key=tenant))(_body)
    return app


def inspector(env: TestEnv) -> Inspector:
    return Inspector(env.engine.store, env.engine.app, env.clock)


def plain_json(document: dict[str, object]) -> bool:
    """Whether ``document`` is plain JSON as it stands: what an HTTP surface sends, read back unchanged."""
    return bool(json.loads(json.dumps(document)) == document)


async def test_runs_filter_and_page_as_the_engine_lists_them(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine, insp = env.engine, inspector(env)
        for n in range(3):
            await engine.start("plain", {"n": n})
            env.clock.advance(1)
        await engine.start("plain", {"n": 9, "fail": True})
        parent = await engine.start("parent", {"n": 10})
        await env.settle()
        await wait_runs(engine, "plain", 4)
        await wait_runs(engine, "plain", 1, status="failed")

        assert await insp.runs() == await engine.list_runs()
        for filters in ({"workflow": "plain"}, {"status": "failed"}, {"parent_id": parent.run_id}, {"limit": 2}):
            assert await insp.runs(**filters) == await engine.list_runs(**filters)  # type: ignore[arg-type]
        first, second = await insp.runs(workflow="plain", limit=2), await insp.runs(workflow="plain", limit=2, offset=2)
        assert [r.id for r in first + second] == [r.id for r in await insp.runs(workflow="plain", limit=4)]
        assert [r.created_at for r in first] == sorted((r.created_at for r in first), reverse=True)

        newest = await insp.runs(workflow="plain", limit=2)
        await engine.start("plain", {"n": 99})  # a new run does not shift a page read by cursor
        after = await insp.runs(workflow="plain", before=newest[-1].id)
        assert [r.id for r in newest + after] == [r.id for r in (await insp.runs(workflow="plain"))[1:]]
        skipped = await insp.runs(workflow="plain", before=newest[0].id, limit=1, offset=1)
        assert [r.id for r in skipped] == [after[0].id]
        assert await insp.runs(before=first[-1].id, status="failed") == []
        with pytest.raises(lg.UnknownRun):
            await insp.runs(before="run_nope")

        [dead] = await insp.runs(dead_letter=True)
        assert (dead.status, dead.workflow) == ("failed", "plain")
        await engine.discard(dead.id)
        assert await insp.runs(dead_letter=True) == []

        with pytest.raises(lg.InvalidArgument, match="unknown status"):
            await insp.runs(status="lost")
        with pytest.raises(lg.InvalidArgument):
            await insp.runs(limit=0)
        with pytest.raises(lg.InvalidArgument):
            await insp.runs(dead_letter=True, status="running")
        assert await insp.runs(workflow="nobody") == []


async def test_run_detail_is_what_the_engine_reads_one_by_one(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine, insp = env.engine, inspector(env)
        parent = await engine.start("parent", {"n": 1})
        failed = await engine.start("plain", {"n": 2, "fail": True})
        assert parent.run_id is not None and failed.run_id is not None
        assert await engine.result(parent.run_id, timeout=10) == 3
        await env.settle()

        for run_id in (parent.run_id, failed.run_id):
            detail = await insp.run_detail(run_id)
            assert detail == RunDetail(
                run=await engine.get_run(run_id),
                steps=await engine.steps(run_id),
                attempts=await engine.attempts(run_id),
                events=await engine.events(run_id),
                children=await engine.list_runs(parent_id=run_id, limit=1000),
            )
            assert detail.run == await insp.run(run_id)
            assert (detail.steps, detail.attempts, detail.events) == (
                await insp.steps(run_id),
                await insp.attempts(run_id),
                await insp.events(run_id),
            )
            assert plain_json(detail.to_dict())
        detail = await insp.run_detail(parent.run_id)
        assert [c.workflow for c in detail.children] == ["plain"]
        failing = await insp.run_detail(failed.run_id)
        assert failing.run.status == "failed"
        assert [(a.step_key, a.status) for a in failing.attempts] == [("boom#0", "failed")]

        with pytest.raises(lg.UnknownRun):
            await insp.run("run_nope")
        with pytest.raises(lg.UnknownRun):
            await insp.run_detail("run_nope")
        assert await insp.steps("run_nope") == [] and await insp.events("run_nope") == []


async def test_flow_and_trace_answer_as_the_engine_does(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine, insp = env.engine, inspector(env)
        since = datetime.fromtimestamp(env.clock.now(), tz=UTC)
        blocker = await engine.start("gated", {"tenant": "acme", "hold": True})
        waiting = await engine.start("gated", {"tenant": "acme", "n": 1})
        first = await engine.start("folded", {"n": 1})
        second = await engine.start("folded", {"n": 2})
        await env.settle()

        assert await insp.flow() == await engine.flow()
        assert await insp.flow("gated") == await engine.flow("gated")
        assert await insp.flow(since=since) == await engine.flow(since=since)
        [gated] = await insp.flow("gated")
        assert (gated.key, gated.queued, gated.in_flight, gated.admitted) == ("acme", 1, 1, 1)
        assert await insp.flow("nobody") == []

        for handle in (blocker, waiting, first, second):
            assert await insp.trace(handle.ticket) == await engine.trace(handle.ticket)
        assert (await insp.trace(second.ticket)).absorbed_by == first.ticket
        trace = await insp.trace(waiting.ticket)
        assert (trace.state, trace.control, trace.key, trace.position) == ("parked", "concurrency", "acme", 0)
        assert plain_json(trace.to_dict())
        with pytest.raises(lg.LockgateError, match="tkt_nope"):
            await insp.trace("tkt_nope")


async def test_ledger_filters_and_pages_newest_first(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine, insp = env.engine, inspector(env)
        plain = [await engine.start("plain", {"n": n}) for n in range(3)]
        env.clock.advance(60)
        later = datetime.fromtimestamp(env.clock.now(), tz=UTC)
        first = await engine.start("folded", {"n": 1})
        second = await engine.start("folded", {"n": 2})
        await env.settle()

        everything = await insp.ledger()
        assert [e.id for e in everything] == sorted((e.id for e in everything), reverse=True)
        assert {e.ticket for e in everything} >= {h.ticket for h in [*plain, first, second]}
        assert [e.ticket for e in await insp.ledger(workflow="plain")] == [h.ticket for h in reversed(plain)]
        [own] = await insp.ledger(ticket=second.ticket)
        assert (own.kind, own.outcome, own.control, own.key) == ("arrival", "collapsed", "debounce", "t")
        assert own.pending_id is not None and own.at is not None
        assert {e.ticket for e in await insp.ledger(outcome="queued")} == {first.ticket}
        assert {e.workflow for e in await insp.ledger(since=later)} == {"folded"}
        assert await insp.ledger(kind="drain") == []
        assert await insp.ledger(ticket="tkt_nope") == []

        page = await insp.ledger(limit=2)
        rest = await insp.ledger(before=page[-1].id, limit=100)
        assert [e.id for e in page + rest] == [e.id for e in everything]
        assert plain_json(page[0].to_dict())
        with pytest.raises(lg.InvalidArgument):
            await insp.ledger(kind="other")
        with pytest.raises(lg.InvalidArgument):
            await insp.ledger(limit=0)


async def test_pauses_and_parked_starts_with_their_tickets(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine, insp = env.engine, inspector(env)
        assert await insp.pauses() == [] and await insp.parked() == []
        await engine.pause("plain", reason="deploy")
        until = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(hours=1)
        await engine.pause_key("acme", until=until, reason="provider down")
        by_kind = {p.kind: p for p in await insp.pauses()}
        assert (by_kind["workflow"].name, by_kind["workflow"].reason, by_kind["workflow"].until) == (
            "plain",
            "deploy",
            None,
        )
        assert (by_kind["key"].scope, by_kind["key"].until) == ("key:acme", until)
        assert by_kind["workflow"].since is not None

        paused = await engine.start("plain", {"n": 1})
        first = await engine.start("folded", {"n": 1})
        second = await engine.start("folded", {"n": 2})
        third = await engine.start("folded", {"n": 3})
        parked = await insp.parked()
        assert [p.ticket for p in parked] == [paused.ticket, first.ticket]
        held = {p.workflow: p for p in parked}
        assert (held["plain"].mode, held["plain"].tickets) == ("paused", [paused.ticket])
        assert (held["folded"].mode, held["folded"].key, held["folded"].folded) == ("debounce", "t", 3)
        assert held["folded"].tickets == [first.ticket, second.ticket, third.ticket]
        assert held["folded"].due_at is not None
        assert await insp.parked(workflow="folded") == [held["folded"]]
        assert await insp.parked(mode="paused") == [held["plain"]]
        assert await insp.parked(after=parked[0].seq) == [parked[1]]
        assert await insp.parked(limit=1) == [parked[0]]
        assert await insp.parked(workflow="nobody") == []
        assert plain_json(parked[1].to_dict())

        await engine.unpause("plain")
        await engine.unpause_key("acme")
        assert await insp.pauses() == []


async def test_stats_count_runs_and_parked_starts(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine, insp = env.engine, inspector(env)
        empty = await insp.stats()
        assert (empty.workflows, empty.totals.parked_total, empty.totals.runs["total"]) == ([], 0, 0)
        await engine.start("plain", {"n": 1})
        await engine.start("plain", {"n": 2, "fail": True})
        await engine.start("folded", {"n": 1})
        await engine.start("folded", {"n": 2})
        await env.settle()
        await wait_runs(engine, "plain", 1, status="failed")

        found = await insp.stats()
        by_name = {w.workflow: w for w in found.workflows}
        assert list(by_name) == ["folded", "plain"]
        assert (
            by_name["plain"].runs["succeeded"],
            by_name["plain"].runs["failed"],
            by_name["plain"].runs["total"],
        ) == (
            1,
            1,
            2,
        )
        assert (by_name["folded"].parked, by_name["folded"].parked_total) == ({"debounce": 1}, 1)
        assert (found.totals.runs["total"], found.totals.parked) == (2, {"debounce": 1})
        only = await insp.stats("plain")
        assert (only.workflow, [w.workflow for w in only.workflows]) == ("plain", ["plain"])
        assert (await insp.stats("nobody")).workflows == []
        assert plain_json(found.to_dict())
        await advance(env, "5m")


async def test_cluster_status_lists_this_worker(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        status = await inspector(env).cluster_status()
        assert status.dialect == env.engine.store.dialect
        [me] = [w for w in status.workers if w.id == env.engine.worker_id]
        assert me.state in ("live", "stale") and me.pid > 0
        assert plain_json(status.to_dict())


async def test_connect_opens_a_store_by_url(store_url: str) -> None:
    async with lg.Engine(make_app(), store_url) as engine:
        handle = await engine.start("plain", {"n": 5})
        assert handle.run_id is not None
        assert await engine.result(handle.run_id, timeout=10) == 5
    async with connect(store_url, make_app()) as insp:
        [run] = await insp.runs()
        assert (run.id, run.output) == (handle.run_id, 5)
        assert (await insp.trace(handle.ticket)).run_id == handle.run_id
    where = locate(store_url)
    assert where.dialect == ("sqlite" if store_url.startswith("sqlite") else "postgres")
    assert (where.path is not None) == store_url.startswith("sqlite")
    with pytest.raises(ValueError):
        locate("mysql://nope")
