"""Three ``lockgate serve`` processes on PostgreSQL: 300 parked waits (1,000 under ``LOCKGATE_TORTURE=long``), as many
publishes from another process, half of them made by an engine there that claims the runs its publishes wake (and
executes them)."""

from __future__ import annotations

import asyncio

import pytest

import lockgate as lg
from lockgate.crypto import KEY_ENV

from .apps.event_waits import app, order_shipped
from .cluster.harness import Cluster, until
from .conftest import LONG
from .test_event_waits import KEY

pytestmark = pytest.mark.slow

APP = "tests.apps.event_waits:app"
RUNS = 1000 if LONG else 300  # each parked on an event wait, then satisfied by its own event


async def test_waits_are_each_satisfied_once_across_three_workers(
    cluster: Cluster, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)  # the app declares an encrypted workflow: every process holds the key
    async with (
        lg.Client(app, pg_url, encryption_keys=[KEY]) as client,
        lg.Engine(app, pg_url, encryption_keys=[KEY], max_concurrent_runs=50, lease="10s") as engine,
    ):
        cluster.spawn(3, app=APP, max_runs=200, lease="10s")
        handles = await asyncio.gather(*(client.start("ew.ship", {"order_id": f"o{n}"}) for n in range(RUNS)))
        await cluster.ready()

        async def parked() -> bool:
            rows = await cluster.fetch("SELECT COUNT(DISTINCT run_id) FROM lockgate_event_waits")
            return int(rows[0][0]) == RUNS

        await cluster.guard(until(parked, timeout=90, what="every run parked on its wait"))
        sem = asyncio.Semaphore(50)

        async def publish(n: int) -> str:
            async with sem:
                publisher = engine if n % 2 else client
                return await publisher.publish(order_shipped, None, {"order_id": f"o{n}", "carrier": f"c{n}"})

        ids = await asyncio.gather(*(publish(n) for n in range(RUNS)))

        async def finished() -> bool:
            rows = await cluster.fetch("SELECT COUNT(*) FROM lockgate_runs WHERE status = 'succeeded'")
            return int(rows[0][0]) == RUNS

        await cluster.guard(until(finished, timeout=90, what="every wait satisfied"))
        for n, h in enumerate(handles):
            assert h.run_id is not None
            assert await client.result(h.run_id, timeout=5) == [[ids[n], f"c{n}"]]
        consumed = await cluster.fetch("SELECT event_id, COUNT(*) FROM lockgate_event_consumed GROUP BY event_id")
        assert sorted(r[0] for r in consumed) == sorted(ids) and {r[1] for r in consumed} == {1}
        assert (await cluster.fetch("SELECT COUNT(*) FROM lockgate_event_waits"))[0][0] == 0
