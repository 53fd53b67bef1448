"""Races between replicas on PostgreSQL that only a second session can show.

A debounce or batch group is decided under its key lock: an arrival folding into it holds
that lock, and the drainer flushing it must wait for it, or the arrival folds into a row
the drain deletes meanwhile and is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate import runs, wait_runs


class Item(BaseModel):
    key: str
    n: int = 0


class Items(BaseModel):
    items: list[Item]


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="gathered", batch=lg.Batch(item=Item, key=lambda i: i.key, max_size=10, timeout="1s"))
    async def gathered(ctx: lg.Context, p: Items) -> list[int]:
        return [i.n for i in p.items]

    return app


async def test_the_drainer_waits_for_an_arrival_deciding_on_the_group_it_flushes(
    env_factory: Callable[..., TestEnv], store_kind: str, store_url: str
) -> None:
    if store_kind != "postgres":
        pytest.skip("one writer decides everything on SQLite: there is no other session to race")
    async with env_factory(make_app()) as env:
        engine = env.engine
        first = await engine.start("gathered", {"key": "k", "n": 1})
        assert first.status == "queued"
        async with await psycopg.AsyncConnection.connect(store_url, autocommit=True) as conn:
            [(group,)] = await (await conn.execute("SELECT group_key FROM lockgate_pending")).fetchall()
            env.clock.advance(2)  # the batch is due
            async with conn.transaction():  # an arrival on another replica, deciding on this group
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"group\x1f{group}"])
                drain = asyncio.create_task(engine.drainer.tick())
                await asyncio.sleep(0.5)
                assert not drain.done(), "the drainer flushed a group whose key another decider held"
                assert await runs(engine, "gathered") == []
            await asyncio.wait_for(drain, 10)
        [run] = await wait_runs(engine, "gathered", 1)
        assert await engine.result(run.id, timeout=10) == [1]
