"""Who claims first when another process makes a run claimable (``engine/claim_order.py``).

On PostgreSQL each wake-up names its transaction; every worker ranks the live workers by it,
alike and without a word to each other: one claims at once, the others a moment later. The
tests: the ranking (one first per token, spread evenly), the deferred wake-up, and on a real
database three engines of their own (each with its own connections) started from a client,
one claiming at once per start; a worker killed while still counted live delays the runs it
was first for by the stagger, never by its lease or a poll.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.engine.claim_order import AT_ONCE, STAGGER, ClaimOrder
from lockgate.store import open_store

from .cluster.harness import Cluster, until


def _order(me: str, wake: Callable[[], None], stagger: float = STAGGER) -> ClaimOrder:
    """A worker's order over a store it never uses here (it would only to pass a wake-up on)."""
    return ClaimOrder(me, open_store("sqlite:///:memory:"), wake, lambda: True, stagger)


def test_each_token_places_the_live_workers_alike_and_spreads_the_first_places() -> None:
    names = [f"wkr_{i}" for i in range(5)]
    orders = [_order(name, lambda: None) for name in names]
    for order in orders:
        order.know((name, f"o{name}") for name in names)
    firsts: Counter[str] = Counter()
    for token in range(1000):
        places = sorted(order.place(str(token)) for order in orders)
        assert places == [0, 1, 2, 3, 4]  # every worker ranks alike: one first, one second, ...
        assert sum(o.place(str(token)) < AT_ONCE for o in orders) == AT_ONCE
        firsts.update(o.me for o in orders if o.place(str(token)) == 0)
    assert all(140 <= firsts[name] <= 260 for name in names), firsts  # about 200 each


def test_without_a_token_or_a_peer_every_worker_is_first() -> None:
    alone = _order("wkr_a", lambda: None)
    assert alone.place("123") == 0  # it knows no other worker
    alone.know([("wkr_a", "oa")])  # itself only
    assert alone.place("123") == 0
    alone.know([("wkr_a", "oa"), ("wkr_b", "ob")])
    assert alone.place("") == 0  # SQLite's change check, a store before the token: all look at once


def test_the_worker_that_raised_a_wake_up_is_never_placed_before_the_others() -> None:
    workers = [("wkr_a", "oa"), ("wkr_b", "ob"), ("wkr_c", "oc")]
    orders = [_order(name, lambda: None) for name, _ in workers]
    for order in orders:
        order.know(workers)
    b, c = orders[1], orders[2]
    for n in range(200):
        token = f"oa:{n}"  # raised by wkr_a: it woke itself; of the two others, one claims at once
        assert sorted([b.place(token), c.place(token)]) == [0, 1]


async def test_a_worker_not_among_the_first_wakes_once_after_the_stagger() -> None:
    woken: list[float] = []
    names = ("wkr_a", "wkr_b", "wkr_c")
    orders = [_order(name, lambda: woken.append(time.monotonic()), stagger=0.05) for name in names]
    for order in orders:
        order.know((name, f"o{name}") for name in names)
    last = next(o for o in orders if o.place("7") == AT_ONCE)
    began = time.monotonic()
    last.woken("7")
    last.woken("7")  # a second wake-up meanwhile is covered by the first's deferred one
    assert woken == []
    await until(_true_when(lambda: len(woken) == 1), timeout=5, what="the deferred wake-up")
    assert woken[0] - began >= 0.05
    await asyncio.sleep(0.1)
    assert len(woken) == 1 and (last.at_once, last.deferred) == (0, 2)
    first = next(o for o in orders if o.place("7") == 0)
    first.woken("7")
    assert len(woken) == 2 and first.at_once == 1  # at once


def _true_when(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return check()

    return probe


# -- on PostgreSQL, across engines of their own ------------------------------------------------

app = lg.App()


class Note(BaseModel):
    text: str = ""


@app.workflow(name="order.echo")
async def echo(ctx: lg.Context, note: Note) -> str:
    return note.text


def idle_engine(url: str) -> lg.Engine:
    """Polls every 30 s: what it claims within seconds, a wake-up made it claim."""
    return lg.Engine(app, url, poll_interval=30.0, lease="2s")


async def _all_know(engines: list[lg.Engine], count: int) -> bool:
    return all(len(e.dispatcher.claim_order._peers) == count for e in engines)


@pytest.mark.slow
async def test_one_engine_claims_at_once_per_start_and_the_first_place_rotates(pg_url: str) -> None:
    async with idle_engine(pg_url) as a, idle_engine(pg_url) as b, idle_engine(pg_url) as c:
        engines = [a, b, c]
        # each learnt of the others as they started (their registrations notify), not at a heartbeat
        await until(lambda: _all_know(engines, 2), timeout=5, what="every engine knows the other two")
        async with lg.Client(app, pg_url) as client:
            for i in range(30):
                handle = await client.start("order.echo", Note(text=str(i)))
                assert handle.run_id is not None
                assert await client.result(handle.run_id, timeout=10) == str(i)
        orders = [e.dispatcher.claim_order for e in engines]
        deferred = sum(o.deferred for o in orders)
        assert deferred >= 30  # one of the three deferred its claim on each start (a run's end wakes nobody)
        # and two claimed at once (on a wake-up one of them raised, its two others: none deferred)
        assert sum(o.at_once for o in orders) >= AT_ONCE * deferred
        assert all(o.deferred for o in orders)  # the places rotate from one start to the next


@pytest.mark.slow
async def test_killed_workers_still_counted_live_delay_their_runs_by_the_stagger(pg_url: str, cluster: Cluster) -> None:
    victims = cluster.spawn(2, lease="60s")  # their rows stay live for a minute after the kill
    await cluster.ready()
    async with idle_engine(pg_url) as a, idle_engine(pg_url) as b:
        await until(lambda: _all_know([a, b], 3), timeout=10, what="both engines know the workers")
        for victim in victims:
            victim.kill()
        async with lg.Client(app, pg_url) as client:
            began = time.monotonic()
            for i in range(30):
                handle = await client.start("order.echo", Note(text=str(i)))
                assert handle.run_id is not None
                assert await client.result(handle.run_id, timeout=10) == str(i)
            took = time.monotonic() - began
        # the dead were the two first for some starts (one in six): the engines took those after the stagger,
        # never after a poll (30 s) nor the dead workers' lease (60 s)
        assert a.dispatcher.claim_order.deferred + b.dispatcher.claim_order.deferred > 0
        assert took < 30 * STAGGER + 10


held = asyncio.Event()


@app.workflow(name="order.hold")
async def hold(ctx: lg.Context, note: Note) -> str:
    await ctx.step("hold", held.wait)
    return note.text


@pytest.mark.slow
async def test_a_full_worker_first_for_a_start_passes_it_on_at_once(pg_url: str) -> None:
    held.clear()
    full = lg.Engine(app, pg_url, poll_interval=30.0, lease="2s", max_concurrent_runs=1)
    async with full, idle_engine(pg_url) as other:
        await until(lambda: _all_know([full, other], 1), timeout=5, what="each engine knows the other")
        # a blocking start is claimed here as it is created: it fills this engine's one place
        busy = asyncio.create_task(full.start("order.hold", Note(text="held"), wait=True))
        await until(lambda: _executing(full), timeout=5, what="the full engine's run under way")
        async with lg.Client(app, pg_url) as client:
            for i in range(20):
                handle = await client.start("order.echo", Note(text=str(i)))
                assert handle.run_id is not None
                assert await client.result(handle.run_id, timeout=10) == str(i)
        passed = full.dispatcher.claim_order.passed_on
        assert passed >= 1  # the full engine was first for some starts, and told the other at once
        # the other claimed at once on every start: first itself, or told by the full one (no token)
        assert other.dispatcher.claim_order.at_once >= 20
        held.set()
        assert await (await busy).result() == "held"


async def _executing(engine: lg.Engine) -> bool:
    return bool(engine.dispatcher.inflight)
