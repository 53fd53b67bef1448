"""A parked start's handle: ``result()`` waits for its admission, then for its run; or says why it has none."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg

from .apps.waits import eventually


class Job(BaseModel):
    n: int
    key: str = "k"


class Go(BaseModel):
    ok: bool = True


def make_app(release: asyncio.Event | None = None) -> lg.App:
    app = lg.App()

    async def hold(n: int) -> int:
        if release is not None:
            await release.wait()
        return n * 10

    @app.workflow(name="h.one", concurrency=lg.Concurrency(limit=1, key=lambda p: p.key))
    async def one(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("hold", hold, p.n))

    @app.workflow(
        name="h.timed",
        concurrency=lg.Concurrency(limit=1),
        timeouts=lg.Timeouts(start="10s"),
    )
    async def timed(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)  # parked, its slot held
        return p.n * 10

    @app.workflow(name="h.debounced", debounce=lg.Debounce(period="5s", key=lambda p: p.key))
    async def debounced(ctx: lg.Context, p: Job) -> int:
        return p.n

    return app


async def test_parked_starts_get_their_own_results_once_admitted(make_engine: Any) -> None:
    release = asyncio.Event()
    async with make_engine(make_app(release)) as engine:
        handles = [await engine.start("h.one", {"n": i}) for i in range(40)]
        assert [h.status for h in handles[:2]] == ["started", "queued"]
        assert handles[1].run_id is None
        waits = asyncio.gather(*(h.result(timeout=60) for h in handles))
        release.set()
        assert await waits == [i * 10 for i in range(40)]
        run_ids = [await h.admitted() for h in handles]
        assert len(set(run_ids)) == 40
        for h, run_id in zip(handles, run_ids, strict=True):
            assert (await engine.trace(h.ticket)).run_id == run_id


async def test_collapsed_arrivals_share_the_run_they_folded_into(env_factory: Any) -> None:
    async with env_factory(make_app()) as env:
        handles = [await env.engine.start("h.debounced", {"n": i}) for i in range(3)]
        assert [h.status for h in handles] == ["queued"] * 3
        waits = asyncio.gather(*(h.result(timeout=30) for h in handles))
        await env.advance("6s")
        assert await waits == [2, 2, 2]  # the last payload wins
        assert len({await h.admitted() for h in handles}) == 1


async def test_a_parked_start_that_expires_or_is_cancelled_says_so(env_factory: Any) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        first = await engine.start("h.timed", {"n": 1})
        expiring = await engine.start("h.timed", {"n": 2})
        cancelled = await engine.start("h.timed", {"n": 3})
        assert (expiring.status, cancelled.status) == ("queued", "queued")
        await engine.cancel_start(cancelled.ticket, "not needed")
        with pytest.raises(lg.StartNotAdmitted) as refused:
            await cancelled.result(timeout=30)
        assert (refused.value.ticket, refused.value.outcome, refused.value.reason) == (
            cancelled.ticket,
            "cancelled",
            "not needed",
        )
        waiting = asyncio.ensure_future(expiring.result(timeout=30))
        await env.advance("11s")
        with pytest.raises(lg.StartNotAdmitted, match="expired"):
            await waiting
        await engine.signal(first.run_id, "go", {})
        assert await first.result(timeout=30) == 10


async def test_waiting_for_a_parked_start_times_out_and_leaves_nothing_behind(make_engine: Any) -> None:
    release = asyncio.Event()
    async with make_engine(make_app(release)) as engine:
        await engine.start("h.one", {"n": 1})
        parked = await engine.start("h.one", {"n": 2})
        with pytest.raises(lg.ResultTimeout, match="not admitted"):
            await parked.result(timeout=0.2)
        assert engine.core.admissions._waiters == {}
        release.set()
        assert await parked.result(timeout=30) == 20


async def test_a_client_sees_a_start_another_process_admits(make_engine: Any, store_url: str) -> None:
    release = asyncio.Event()
    app = make_app(release)
    async with make_engine(app) as engine, lg.Client(app, store_url) as client:
        first = await client.start("h.one", {"n": 1, "key": "c"})
        await eventually(lambda: first.run_id in engine.executing, what="the first run executing")
        second = await client.start("h.one", {"n": 2, "key": "c"})
        assert second.status == "queued"
        waiting = asyncio.ensure_future(second.result(timeout=30))
        release.set()
        assert await waiting == 20


async def test_a_start_with_no_run_to_wait_for_is_refused_plainly(make_engine: Any) -> None:
    app = lg.App()

    @app.workflow(name="h.limited", rate_limit=lg.RateLimit(limit=1, period="1h"))
    async def limited(ctx: lg.Context, p: Job) -> int:
        return p.n

    async with make_engine(app) as engine:
        assert await (await engine.start("h.limited", {"n": 1})).result(timeout=10) == 1
        dropped = await engine.start("h.limited", {"n": 2})
        assert dropped.status == "dropped"
        with pytest.raises(ValueError, match="no run to wait for"):
            await dropped.result()
        with pytest.raises(lg.LockgateError, match="no arrival with ticket"):
            await engine.admitted_run("tkt_unknown", timeout=10)


async def test_closing_the_engine_ends_a_wait_for_admission_and_the_start_stays_parked(
    make_engine: Any, store_url: str
) -> None:
    release = asyncio.Event()
    app = make_app(release)
    async with make_engine(app) as engine:
        first = await engine.start("h.one", {"n": 1})
        parked = await engine.start("h.one", {"n": 2})
        assert parked.status == "queued"
        waiting = asyncio.ensure_future(parked.result())
        await eventually(lambda: engine.core.admissions._waiters, what="a waiter for the parked start")
    with pytest.raises(lg.EngineClosed, match=parked.ticket):
        await asyncio.wait_for(waiting, 10)
    release.set()
    async with make_engine(app) as engine:  # the start was not lost: the next engine admits and runs it
        assert await engine.result(first.run_id, timeout=30) == 10
        with pytest.raises(lg.EngineClosed):  # its handle belongs to the closed engine, which waits for nothing
            await parked.result(timeout=30)
        run_id = await engine.admitted_run(parked.ticket, timeout=30)
        assert await engine.result(run_id, timeout=30) == 20


async def test_more_waits_than_one_poll_reads_all_end_in_any_order(
    make_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll reads at most ``PER_POLL`` waiting tickets (the longest waiting and a turn of the others): every
    wait still ends, the youngest too when its priority admits it before the ones waiting longer."""
    from lockgate.engine import admissions

    monkeypatch.setattr(admissions, "PER_POLL", 4)
    release = asyncio.Event()
    app = lg.App()

    async def hold(n: int) -> int:
        await release.wait()
        return n * 10

    @app.workflow(name="h.ranked", concurrency=lg.Concurrency(limit=1), priority=lambda p: 10 if p.n == 99 else 0)
    async def ranked(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("hold", hold, p.n))

    async with make_engine(app) as engine:
        handles = [await engine.start("h.ranked", {"n": i}) for i in range(16)]
        urgent = await engine.start("h.ranked", {"n": 99})  # admitted next, past the fifteen waiting before it
        waits = asyncio.gather(*(h.result(timeout=60) for h in [*handles, urgent]))
        await eventually(lambda: len(engine.core.admissions._waiters) == 16, what="the parked starts' waits")
        release.set()
        assert await waits == [i * 10 for i in range(16)] + [990]
