"""Two worker processes on one PostgreSQL database: limited parents and children never deadlock, the limit holds."""

from __future__ import annotations

import asyncio

import pytest

import lockgate as lg

from .apps.child_slots import app
from .cluster.harness import Cluster

pytestmark = pytest.mark.slow

APP = "tests.apps.child_slots:app"


async def test_nested_and_crossed_limited_children_finish_across_two_workers(cluster: Cluster, pg_url: str) -> None:
    async with lg.Client(app, pg_url) as client:
        trees = [await client.start("cs.nest", {"n": 2, "tag": f"t{i}"}) for i in range(4)]
        lefts = [await client.start("cs.left", {"n": 1, "tag": f"l{i}"}) for i in range(3)]
        rights = [await client.start("cs.right", {"n": 1, "tag": f"r{i}"}) for i in range(3)]
        cluster.spawn(2, app=APP)
        await cluster.ready()
        most = 0
        sampling = True

        async def sample() -> None:  # slots held per workflow, as the store sees them, while the work runs
            nonlocal most
            while sampling:
                rows = await cluster.fetch("SELECT workflow, COUNT(*) FROM lockgate_slots GROUP BY workflow")
                most = max([most, *(n for _, n in rows)])
                await asyncio.sleep(0.02)

        sampler = asyncio.ensure_future(sample())

        async def results() -> list[object]:
            return [await h.result(timeout=120) for h in (*trees, *lefts, *rights)]

        try:
            out = await cluster.guard(results())
        finally:
            sampling = False
            await sampler
    assert out == [f"2(1(t{i}))" for i in range(4)] + [f"cs.right:l{i}" for i in range(3)] + [
        f"cs.left:r{i}" for i in range(3)
    ]
    assert most <= 1  # Concurrency(limit=1): never two slots of one workflow, across both workers
    assert await cluster.fetch("SELECT COUNT(*) FROM lockgate_slots") == [(0,)]
