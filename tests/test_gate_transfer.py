"""A freed slot passed on without the key's lock (gate/handoff.py, PostgreSQL): the limit still holds.

Each slot a run's end frees goes to one start in line, without the key's lock, while other
engines end their runs, arrivals are decided and the drainer fills the room left. What is
checked is what the bodies see: never more of them in flight than the limit.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.gate import handoff as handoff_module
from lockgate.gate.handoff import HandOff, finish_passing
from lockgate.store import runs, shared

from .apps.gate_probes import pending_rows, slot_rows, sql

LIMIT = 3


class Job(BaseModel):
    n: int


class Bodies:
    """How many bodies run now, and the most that ever ran at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.done = 0

    async def work(self, n: int) -> int:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(random.uniform(0, 0.004))
        finally:
            self.now -= 1
            self.done += 1
        return n


def make_app(bodies: Bodies) -> lg.App:
    app = lg.App()

    @app.workflow(name="conc", concurrency=lg.Concurrency(limit=LIMIT))
    async def conc(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("work", bodies.work, p.n))

    return app


def count_passes(monkeypatch: pytest.MonkeyPatch) -> dict[bool, int]:
    """How many hand-offs went each way (``True``: without the key's lock)."""
    seen = {True: 0, False: 0}
    original = handoff_module._pass_on

    async def counted(tx: Any, slot: Any, ended: Any, *, transfer: bool) -> None:
        seen[transfer] += 1
        await original(tx, slot, ended, transfer=transfer)

    monkeypatch.setattr(handoff_module, "_pass_on", counted)
    return seen


async def test_three_engines_passing_slots_beside_arrivals_never_exceed_the_limit(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three engines, each its own store (its own transactions), end runs of one key while starts keep
    arriving in bursts: on PostgreSQL slots pass from run to start without the key's lock, and no more
    than the limit of bodies ever run at once; every start runs."""
    random.seed(7)
    bodies = Bodies()
    app = make_app(bodies)
    passes = count_passes(monkeypatch)
    engines = [lg.Engine(app, store_url, poll_interval="50ms") for _ in range(3)]
    for engine in engines:
        await engine.open()
    try:
        async with lg.Client(app, store_url) as client:
            handles = []
            for burst in range(6):
                handles += await asyncio.gather(*(client.start("conc", Job(n=burst * 10 + i)) for i in range(10)))
                await asyncio.sleep(random.uniform(0, 0.02))
            assert sorted([await h.result(timeout=60) for h in handles]) == list(range(60))
    finally:
        for engine in engines:
            await engine.close()
    assert bodies.done == 60
    assert bodies.most <= LIMIT
    assert passes[True] > 0 if store_url.startswith("postgresql") else passes[True] == 0


async def test_an_end_that_freed_no_slot_of_its_own_passes_none_without_the_lock(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose slot row is gone (taken from it elsewhere) frees nothing: its end takes the locked way,
    which admits only into the room the key has, never past the limit."""
    passes = count_passes(monkeypatch)
    app = make_app(Bodies())
    async with lg.Client(app, store_url) as client:
        for i in range(LIMIT + 2):
            await client.start("conc", Job(n=i))
        now = client.clock.now()
        held = await client.store.write(runs.claim_runs, "w-test", now, now + 3600, LIMIT, ["conc"])
        assert len(held) == LIMIT
        gone = held[0]
        await sql(store_url, "DELETE FROM lockgate_slots WHERE run_id = ?", gone["id"])
        defn = client.app.get("conc")
        handoff = HandOff("wf:conc", "", LIMIT, defn.gate, client.new_run_row(defn, "{}"), "w-test", 3600.0)
        fence = shared.Fence(gone["id"], "w-test", int(gone["epoch"]))
        await client.store.write(finish_passing, fence, client.clock.now(), handoff, status="succeeded")
        assert len(await slot_rows(store_url)) == LIMIT  # the room the missing slot left, filled once
        assert len(await pending_rows(store_url)) == 1
    # the way that committed was the locked one (a first attempt without the lock, if any, was rolled back)
    assert passes[False] == 1
