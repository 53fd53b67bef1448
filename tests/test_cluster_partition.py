"""A worker cut off from the database by the network notices it, and rejoins as soon as it heals.

The worker runs in a network namespace of its own and reaches a private server (its own,
never the shared one) over a veth pair. The cut takes the host's end of the pair down:
the worker's packets are dropped without a word, as on a partition. TCP keepalives and
``tcp_user_timeout`` on every connection, and the stalled-commit watch, make the outage a
log line within about one lease; when the link comes back the worker is back within a
second or two, whatever the cut's length, and every run it was given ends.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

import lockgate as lg

from .cluster.app import DB_ENV, Job
from .cluster.app import app as cluster_app
from .cluster.harness import Cluster, until
from .pg import in_ci
from .pgserver import PrivatePostgres, find_bin

pytestmark = pytest.mark.slow

NS, HOST, PEER = "lgpart", "lgpv0", "lgpv1"
SERVER_IP, WORKER_IP = "10.202.0.1", "10.202.0.2"


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=30)


@pytest.fixture
def server() -> Iterator[PrivatePostgres]:
    """A private server listening on the host's end of a veth pair whose other end is in ``NS``."""
    bindir = find_bin()
    if bindir is None or os.geteuid() != 0 or _sh("ip", "netns", "add", NS, check=False).returncode != 0:
        if in_ci():
            pytest.fail("a network namespace and a private PostgreSQL server are needed (root, iproute2)")
        pytest.skip("needs root, iproute2 and PostgreSQL server binaries")
    pg = PrivatePostgres(bindir)
    try:
        _sh("ip", "link", "add", HOST, "type", "veth", "peer", "name", PEER)
        _sh("ip", "link", "set", PEER, "netns", NS)
        _sh("ip", "addr", "add", f"{SERVER_IP}/30", "dev", HOST)
        _sh("ip", "link", "set", HOST, "up")
        _sh("ip", "netns", "exec", NS, "ip", "addr", "add", f"{WORKER_IP}/30", "dev", PEER)
        _sh("ip", "netns", "exec", NS, "ip", "link", "set", PEER, "up")
        _sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
        pg.init()
        with (pg.data / "postgresql.conf").open("a") as conf:
            conf.write(f"listen_addresses = '127.0.0.1,{SERVER_IP}'\n")
        with (pg.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {SERVER_IP}/30 trust\n")
        pg.start()
        yield pg
    finally:
        pg.close()
        _sh("ip", "link", "del", HOST, check=False)
        _sh("ip", "netns", "del", NS, check=False)


def _logged_at(log: str, pattern: str, after: float) -> float | None:
    """When the first line matching ``pattern`` at or after ``after`` was logged (epoch seconds)."""
    for line in log.splitlines():
        if re.search(pattern, line):
            at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if at >= after:
                return at
    return None


async def test_a_partitioned_worker_notices_and_rejoins_when_the_link_heals(
    server: PrivatePostgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = server.create_database()
    remote = url.replace("127.0.0.1", SERVER_IP)
    monkeypatch.setenv(DB_ENV, remote)
    cluster = Cluster(remote, tmp_path)
    try:
        async with lg.Client(cluster_app, url) as client:
            await cluster.setup()
            (worker,) = cluster.spawn(1, lease="5s", store=remote, args=["--no-http"], wrap=["ip", "netns", "exec", NS])
            await cluster.ready()
            for i in range(3):
                await client.start("cluster.steps", Job(n=i, hold=0.1))
            cut = time.time()
            _sh("ip", "link", "set", HOST, "down")
            for i in range(3):  # work that arrives during the cut
                await client.start("cluster.steps", Job(n=10 + i, hold=0.1))
            await asyncio.sleep(15)
            healed = time.time()
            _sh("ip", "link", "set", HOST, "up")

            async def rejoined() -> float | None:
                return _logged_at(worker.log(), r"reachable again|available again", healed)

            back = await until(rejoined, timeout=30, what="the worker said the database is back")
            await until(lambda: cluster.all_succeeded("cluster.steps", 6), timeout=30, what="every run ended")
        down = _logged_at(worker.log(), r"database unreachable|store unavailable|a commit has waited", cut)
        print(f"outage said {down - cut if down else -1:.1f}s into the cut; back {back - healed:.1f}s after it healed")
        assert down is not None and down - cut < 5 + 3, worker.log()
        assert back - healed < 3.0, f"back {back - healed:.1f}s after the link healed\n{worker.log()}"
        assert worker.log().count("database unreachable") <= 2, worker.log()
    finally:
        await cluster.close()
