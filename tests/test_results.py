"""Waiting for results: what a waiter reads, and how many reads a burst of waiters costs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.errors import RunFailed, UnknownRun

from .apps.waits import eventually


class Item(BaseModel):
    i: int


def build_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="double")
    async def double(ctx: lg.Context, p: Item) -> int:
        return int(await ctx.step("twice", lambda: p.i * 2))

    @app.workflow(name="broken")
    async def broken(ctx: lg.Context, p: Item) -> int:
        raise ValueError(f"no {p.i}")

    return app


def count_reads(client: lg.Client) -> list[str]:
    """The names of the ops reading run rows that ``client`` runs from here on (the store answers them).

    The engine's own sweeps read other tables meanwhile; they are not what a waiter costs.
    """
    names: list[str] = []
    read = client.store.read

    async def counted(op: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        if op.__name__ in ("get_run", "get_runs", "ended_rows"):
            names.append(op.__name__)
        return await read(op, *args, **kwargs)

    client.store.read = counted  # type: ignore[method-assign]
    return names


async def test_a_burst_of_waiters_reads_its_runs_together(make_engine: Any, store_url: str) -> None:
    app = build_app()
    async with make_engine(app) as engine:
        handles = [await engine.start("double", {"i": i}) for i in range(60)]
        assert await asyncio.gather(*(h.result(timeout=30) for h in handles)) == [2 * i for i in range(60)]
    async with lg.Client(app, store_url) as client:  # knows nothing of these runs: it must read them
        reads = count_reads(client)
        results = await asyncio.gather(*(client.result(h.run_id, timeout=30) for h in handles))
    assert results == [2 * i for i in range(60)]
    assert reads.count("get_runs") <= 2 and "get_run" not in reads  # one read for all, not one each


async def test_a_waiter_for_an_unknown_run_is_told_so(make_engine: Any) -> None:
    async with make_engine(build_app()) as engine:
        looks = [engine.result("no-such-run", timeout=5), engine.result("nor-this", timeout=5)]
        outcomes = await asyncio.gather(*looks, return_exceptions=True)
    assert [type(o) for o in outcomes] == [UnknownRun, UnknownRun]
    assert "no-such-run" in str(outcomes[0]) and "nor-this" in str(outcomes[1])


async def test_a_run_that_succeeded_here_is_answered_without_a_read(make_engine: Any) -> None:
    async with make_engine(build_app()) as engine:
        handle = await engine.start("double", {"i": 21})
        assert await handle.result(timeout=30) == 42
        reads = count_reads(engine)
        assert await engine.result(handle.run_id, timeout=5) == 42
        assert reads == []


async def test_a_failed_run_is_read_again_for_it_may_be_retried(make_engine: Any) -> None:
    async with make_engine(build_app()) as engine:
        handle = await engine.start("broken", {"i": 7})
        with pytest.raises(RunFailed, match="no 7"):
            await handle.result(timeout=30)
        reads = count_reads(engine)
        with pytest.raises(RunFailed, match="no 7"):
            await engine.result(handle.run_id, timeout=5)
        assert reads == ["get_runs"]  # a retry reopens a failed run: its end is not kept


async def test_a_run_another_process_ends_is_answered_by_the_poll_that_sees_it_end(
    make_engine: Any, store_url: str
) -> None:
    app = build_app()
    async with lg.Client(app, store_url) as client:
        handle = await client.start("double", {"i": 5})  # no engine yet: the waiter's first read finds it waiting
        reads = count_reads(client)
        waiting = asyncio.ensure_future(client.result(handle.run_id, timeout=30))
        await eventually(lambda: "get_runs" in reads, what="the waiter's first read")
        async with make_engine(app):
            assert await waiting == 10
    first = reads.index("get_runs")
    assert reads[first + 1 :] and set(reads[first + 1 :]) == {"ended_rows"}  # the poll's row is the answer


async def test_a_waiter_hears_another_process_end_its_run_before_its_next_poll(
    make_engine: Any, store_url: str
) -> None:
    """PostgreSQL notifies a run's end (migration 0056); SQLite's change check sees the commit: either way the
    waiter reads at once, long before its back-off (grown here to seconds) would have it look again."""
    app = lg.App()
    release = asyncio.Event()

    @app.workflow(name="held")
    async def held(ctx: lg.Context, p: Item) -> int:
        await release.wait()
        return p.i

    async with make_engine(app) as engine, lg.Client(app, store_url, poll_interval=30) as client:
        handle = await engine.start("held", {"i": 3})
        waiting = asyncio.ensure_future(client.result(handle.run_id, timeout=60))
        results = client.core.results

        def poll() -> tuple[float, float]:
            return results._polls.get(handle.run_id, (0.0, 0.0))  # (next poll at, back-off)

        await eventually(lambda: poll()[1] >= 2, what="a back-off of seconds", timeout=30)
        last = poll()[0]
        await eventually(lambda: poll()[0] > last, what="the next poll", timeout=30)  # it just polled
        next_poll = poll()[0]
        release.set()
        assert await waiting == 3
        assert asyncio.get_running_loop().time() < next_poll  # answered by the end's news, not by a poll


async def test_closing_ends_a_look_whose_read_is_in_flight(store_url: str) -> None:
    """A close while the looks' read is on its way to the store ends those looks too (they are no longer
    queued: the read holds them)."""
    if not store_url.startswith("postgresql"):
        pytest.skip("SQLite answers a read within the loop's turn: no read is in flight at a close")
    client = lg.Client(build_app(), store_url)
    await client.open()
    handle = await client.start("double", {"i": 1})
    results = client.core.results
    look = asyncio.ensure_future(results.look(handle.run_id))
    for _ in range(2):  # the look is asked, then its read begins (and waits for the store's answer)
        await asyncio.sleep(0)
    assert results._looking is not None and not results._looking.done() and not results._looks
    await client.close()
    with pytest.raises(lg.EngineClosed):
        await asyncio.wait_for(look, 10)


async def test_closing_ends_every_wait_and_the_runs_go_on(make_engine: Any, store_url: str) -> None:
    app = build_app()
    client = lg.Client(app, store_url)
    await client.open()
    handles = [await client.start("double", {"i": i}) for i in range(3)]  # no engine executes them yet
    waits = [asyncio.ensure_future(h.result()) for h in handles]  # no timeout: only the close ends them
    await eventually(lambda: len(client.core.results._waiters) == 3, what="three waiters")
    await client.close()
    outcomes = await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), 10)
    assert [type(o) for o in outcomes] == [lg.EngineClosed] * 3
    assert handles[0].run_id in str(outcomes[0])
    with pytest.raises(lg.EngineClosed):  # a closed client reads nothing, and does not wait
        await client.result(handles[0].run_id, timeout=5)
    async with make_engine(app) as engine:  # the runs were never lost: an open engine runs and answers them
        assert await asyncio.gather(*(engine.result(h.run_id, timeout=30) for h in handles)) == [0, 2, 4]
