"""PostgreSQL faults under load, on a private server: restarts, terminated backends, a partition.

Three ``lockgate serve`` processes run three-step workflows (tests/cluster/app.py) whose
steps record their side effects in the same database. Whatever the server goes through,
every run ends succeeded with each step journaled once, each worker logs one line per
outage and stays up, and no traceback is printed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lockgate as lg

from .cluster.app import Job
from .cluster.app import app as cluster_app
from .cluster.harness import Cluster, until
from .conftest import LONG
from .pg import PgProxy
from .pgserver import PrivatePostgres

pytestmark = pytest.mark.slow

RUNS = 9
OUTAGE = "database unreachable"


@pytest.fixture
def server(private_pg: PrivatePostgres) -> PrivatePostgres:
    return private_pg


@pytest.fixture
def url(server: PrivatePostgres) -> str:
    if not server.running():  # a test that failed mid-fault may have left it down
        server.start()
    return server.create_database("faults")


@pytest.fixture
async def cluster(url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    async with lg.Client(cluster_app, url):  # migrates
        pass
    group = Cluster(url, tmp_path)
    await group.setup()
    try:
        yield group
    finally:
        await group.close()


async def _load(cluster: Cluster, url: str, hold: float = 0.5) -> list[str]:
    async with lg.Client(cluster_app, url) as client:
        handles = await asyncio.gather(*(client.start("cluster.steps", Job(n=i, hold=hold)) for i in range(RUNS)))
    run_ids = [h.run_id or "" for h in handles]

    async def busy() -> bool:
        return len(await cluster.effects("two-start")) >= 3

    await until(busy, what="runs in the middle of step two")
    return run_ids


async def _settled(cluster: Cluster, url: str, run_ids: list[str], outages: int) -> None:
    """Every run succeeded once, every step journaled once; each worker logged at most ``outages`` outages."""
    await until(lambda: cluster.all_succeeded("cluster.steps", RUNS), timeout=120, what="every run succeeded")
    async with lg.Client(cluster_app, url) as client:
        for run_id in run_ids:
            assert [(s.key, s.status) for s in await client.steps(run_id)] == [
                ("one#0", "completed"),
                ("two#0", "completed"),
                ("three#0", "completed"),
            ]
            assert [e.type for e in await client.events(run_id)].count("run-succeeded") == 1
    effects = Counter((run, step) for run, step, _ in await cluster.effects())
    assert all(effects[(r, "three")] >= 1 for r in run_ids)
    for worker in cluster.workers:
        text = worker.log()
        assert worker.alive(), text
        assert text.count(OUTAGE) <= outages, f"{worker.name} logged an outage more than once:\n{text}"
        assert text.count(OUTAGE) == text.count("database reachable again"), text
        assert "Traceback" not in text, text


@pytest.mark.parametrize("mode", ["fast", "immediate"] if LONG else ["immediate"])
async def test_a_server_restart_mid_load_loses_nothing(
    server: PrivatePostgres, cluster: Cluster, url: str, mode: str
) -> None:
    cluster.spawn(3, lease="1s", max_runs=6, args=("--no-http",))
    await cluster.ready(timeout=60)
    run_ids = await _load(cluster, url)
    server.stop(mode)  # type: ignore[arg-type]
    await asyncio.sleep(1.5)  # longer than the lease: every lease lapses while the server is down
    server.start()
    await _settled(cluster, url, run_ids, outages=1)


async def test_terminating_every_lockgate_backend_again_and_again_loses_nothing(cluster: Cluster, url: str) -> None:
    cluster.spawn(3, lease="2s", max_runs=6, args=("--no-http",))
    await cluster.ready(timeout=60)
    run_ids = await _load(cluster, url, hold=1.0)
    rounds = 0
    for _ in range(5):
        rounds += 1
        assert await cluster.terminate_backends() >= 1
        await asyncio.sleep(0.4)
    await _settled(cluster, url, run_ids, outages=rounds)


async def test_a_partition_that_delays_then_drops_traffic_loses_nothing(
    server: PrivatePostgres, cluster: Cluster, url: str
) -> None:
    proxy = PgProxy(server.url())
    await proxy.start()
    try:
        cluster.spawn(3, lease="1s", max_runs=6, store=proxy.url(url), args=("--no-http",))
        await cluster.ready(timeout=60)
        run_ids = await _load(cluster, url)
        proxy.delay = 0.2  # a slow link first: slower, not an outage
        await asyncio.sleep(2.0)
        proxy.delay = 0.0
        await proxy.stop()  # then no link at all, for longer than the lease
        down = time.monotonic()

        async def everyone_noticed() -> bool:
            return all(OUTAGE in w.log() for w in cluster.workers) and time.monotonic() - down > 2.0

        await until(everyone_noticed, timeout=30, what="every worker saw the outage")
        await proxy.start()
        await _settled(cluster, url, run_ids, outages=1)
    finally:
        await cluster.close()
        await proxy.stop()
