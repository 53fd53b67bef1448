"""A zombie worker: frozen (SIGSTOP) past its lease while it holds runs, then thawed (SIGCONT).

Another worker takes its runs over; when the zombie wakes, its late writes are refused by
the fence, it says so once per run, nothing it did after losing the lease is visible, and
it goes back to work like any other worker.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lockgate as lg

from .cluster.app import Job
from .cluster.app import app as cluster_app
from .cluster.harness import Cluster, until
from .pgserver import PrivatePostgres

pytestmark = pytest.mark.slow


@pytest.fixture
def server(private_pg: PrivatePostgres) -> PrivatePostgres:
    return private_pg


@pytest.fixture
async def cluster(server: PrivatePostgres, tmp_path: Path) -> AsyncIterator[Cluster]:
    url = server.create_database("zombie")
    async with lg.Client(cluster_app, url):  # migrates
        pass
    group = Cluster(url, tmp_path)
    await group.setup()
    try:
        yield group
    finally:
        await group.close()


async def test_a_thawed_zombie_is_fenced_says_so_once_and_rejoins(cluster: Cluster) -> None:
    cluster.spawn(3, lease="1s", max_runs=4, args=("--no-http",))
    await cluster.ready(timeout=60)
    async with lg.Client(cluster_app, cluster.url) as client:
        gated = [(await client.start("cluster.gated", Job(n=i))).run_id or "" for i in range(6)]

        async def holder() -> tuple[int, set[str]] | None:
            rows = await cluster.fetch(
                "SELECT pid, array_agg(run_id) FROM cluster_effects WHERE step = 'work-start' GROUP BY pid "
                "ORDER BY count(*) DESC"
            )
            started = sum(len(r[1]) for r in rows)
            return (rows[0][0], set(rows[0][1])) if started == len(gated) else None

        pid, held = await until(holder, timeout=60, what="every gated run in its step")
        zombie = cluster.by_pid(pid)
        await cluster.freeze(zombie)

        async def taken_over() -> bool:
            rows = await cluster.fetch(
                "SELECT DISTINCT run_id FROM cluster_effects WHERE step = 'work-start' AND pid <> %s", pid
            )
            return held <= {r[0] for r in rows}

        await cluster.guard(until(taken_over, timeout=30, what="the zombie's runs taken over"))
        await cluster.execute("INSERT INTO cluster_flags (name) VALUES ('release')")
        await until(lambda: cluster.all_succeeded("cluster.gated", len(gated)), timeout=60, what="gated runs done")
        zombie.signal(signal.SIGCONT)

        def lost() -> Counter[str]:
            return Counter(re.findall(r"run (run_\w+): lease lost", zombie.log()))

        async def noticed() -> bool:
            return held <= set(lost())

        await until(noticed, timeout=30, what="the zombie noticed each run it lost")
        await asyncio.sleep(1.0)  # time for any repeat of the message
        assert all(n == 1 for n in lost().values()), f"logged more than once:\n{zombie.log()}"
        for run_id in gated:
            steps = await client.steps(run_id)
            assert [s.status for s in steps] == ["completed", "completed"]
            assert pid not in [s.output for s in steps], "a write of the zombie's after it lost the lease is visible"
            assert [e.type for e in await client.events(run_id)].count("run-succeeded") == 1
        after = [pid for _, _, pid in await cluster.effects("after")]
        assert zombie.pid not in after and len(after) == len(gated), after
        assert (await cluster.fetch("SELECT COUNT(*) FROM lockgate_slots"))[0][0] == 0

        # It rejoins: new work reaches it as it reaches any worker.
        fresh = [(await client.start("cluster.steps", Job(n=i, hold=0.3))).run_id or "" for i in range(12)]
        await until(lambda: cluster.all_succeeded("cluster.steps", len(fresh)), timeout=90, what="fresh runs done")
        runners = Counter(p for r, _, p in await cluster.effects("one") if r in fresh)
        assert runners[zombie.pid] >= 1, f"the thawed worker took no new work: {runners}"
        assert zombie.alive()
        assert "Traceback" not in zombie.log(), zombie.log()
