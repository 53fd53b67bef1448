"""A failover to a promoted standby, with every process on the multi-host URL.

Two engines and a client use ``postgresql://h1,h2/db?target_session_attrs=read-write`` over a
private primary and its streaming standby (``tests/pgserver.py``). Runs are started in a stream;
the primary is killed (``kill -9``) and the standby promoted at once. Under synchronous replication
every acknowledged start is on the new primary and no completed step runs again. Under
asynchronous replication, the standby first cut off for a second (so it is behind), the starts
acknowledged meanwhile may be lost (they are counted) and steps may run again, but no run stays
``running``: each one the new primary holds ends.

The bad input of a failover set-up, a standby given as the write store or a multi-host URL whose
hosts hold no primary, is one clear line naming the host, on the same pair of servers.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg

from .cluster.harness import until
from .pgserver import Replicas, free_port

pytestmark = pytest.mark.slow

app = lg.App()
STEPS = ("one", "two", "three")
EXECUTIONS: list[tuple[str, str, float]] = []  # (run id, step, when it began: time.monotonic())


class Job(BaseModel):
    n: int = 0


async def act(run_id: str, step: str) -> str:
    EXECUTIONS.append((run_id, step, time.monotonic()))
    await asyncio.sleep(0.05)
    return step


@app.workflow(name="failover.steps")
async def steps(ctx: lg.Context, job: Job) -> int:
    for step in STEPS:
        await ctx.step(step, act, ctx.run_id, step)
    return job.n


@pytest.fixture
def pair(replica_pair: Replicas) -> Replicas:
    """The session's primary and standby (conftest.py): a failover uses the standby up, the next test rebuilds one."""
    return replica_pair


@dataclass
class Outcome:
    acked: list[tuple[str, float]] = field(default_factory=list)  # (run id, when acknowledged: time.time())
    errors: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    rerun: list[tuple[str, str]] = field(default_factory=list)  # (run, step): run again after the next began
    downtime: float = 0.0  # from the kill to the first start acknowledged after it
    after_promote: float = 0.0
    cut_at: float = 0.0


async def _drive(client: lg.Client, stop: asyncio.Event, out: Outcome) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        try:
            handle = await asyncio.wait_for(client.start("failover.steps", Job(n=n)), 15)
        except Exception as exc:
            out.errors.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.05)
            continue
        assert handle.run_id is not None
        out.acked.append((handle.run_id, time.time()))
        await asyncio.sleep(0.02)


def _completed_then_rerun() -> list[tuple[str, str]]:
    """Steps executed again after the run's next step had begun (so after their entry was committed)."""
    began: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run_id, step, at in EXECUTIONS:
        began[(run_id, step)].append(at)
    found = []
    for (run_id, step), times in began.items():
        if step == STEPS[-1] or len(times) < 2:
            continue
        following = began.get((run_id, STEPS[STEPS.index(step) + 1]), [])
        if following and max(times) > min(following):
            found.append((run_id, step))
    return found


async def _fail_over(pair: Replicas, *, synchronous: bool) -> Outcome:
    await asyncio.to_thread(pair.ensure_standby)
    url = pair.create_database("failover")
    await asyncio.to_thread(pair.replicate, synchronous=synchronous)
    EXECUTIONS.clear()
    out = Outcome()
    options: dict[str, object] = {"lease": "1s", "poll_interval": 0.05}
    async with (
        lg.Client(app, url) as client,
        lg.Engine(app, url, **options) as _one,  # type: ignore[arg-type]
        lg.Engine(app, url, **options) as _two,  # type: ignore[arg-type]
    ):
        stop = asyncio.Event()
        driver = asyncio.create_task(_drive(client, stop, out))
        await until(lambda: _ready(len(out.acked) >= 20), timeout=20, what="starts acknowledged")
        if not synchronous:
            out.cut_at = await asyncio.to_thread(pair.cut)  # the standby has all acknowledged before; no more
            await asyncio.sleep(1.0)
        killed, promoted = await asyncio.to_thread(pair.fail)
        await until(
            lambda: _ready(sum(1 for _, at in out.acked if at > promoted) >= 10), timeout=30, what="starts again"
        )
        stop.set()
        await driver

        async def ended() -> bool:
            rows = await _fetch(url, "SELECT count(*) FROM lockgate_runs WHERE status NOT IN ('succeeded')")
            return bool(rows[0][0] == 0)

        await until(ended, timeout=30, what="every run on the new primary ended")
    present = {r[0] for r in await _fetch(url, "SELECT id FROM lockgate_runs")}
    out.lost = [run_id for run_id, _ in out.acked if run_id not in present]
    # A backend of the killed primary may acknowledge one more commit before it notices: lost with the rest.
    first = min(at for run_id, at in out.acked if at > killed and run_id in present)
    out.downtime, out.after_promote = first - killed, first - promoted
    out.rerun = _completed_then_rerun()
    return out


async def _ready(value: bool) -> bool:
    return value


async def _fetch(url: str, query: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await (await conn.execute(query)).fetchall()


async def test_synchronous_replication_loses_no_acknowledged_start_and_reruns_no_completed_step(
    pair: Replicas,
) -> None:
    out = await _fail_over(pair, synchronous=True)
    print(
        f"synchronous: {len(out.acked)} acknowledged, downtime {out.downtime:.2f}s "
        f"({out.after_promote:.2f}s after the promote)"
    )
    assert out.lost == [], f"acknowledged starts lost: {out.lost}"
    assert out.rerun == [], f"completed steps run again: {out.rerun}"
    assert out.downtime < 10, out.downtime


async def test_asynchronous_replication_leaves_no_run_stuck(pair: Replicas) -> None:
    out = await _fail_over(pair, synchronous=False)
    print(
        f"asynchronous: {len(out.acked)} acknowledged, {len(out.lost)} lost, {len(out.rerun)} completed steps run "
        f"again, downtime {out.downtime:.2f}s ({out.after_promote:.2f}s after the promote)"
    )
    late = [run_id for run_id, at in out.acked if run_id in out.lost and at < out.cut_at]
    assert late == [], f"starts acknowledged before the standby fell behind were lost: {late}"
    assert out.lost, "the standby was behind: some acknowledged starts should be missing from it"
    assert out.downtime < 10, out.downtime


# -- bad input: a store that cannot take writes -------------------------------------------------


def _serve_lines(*stores: str) -> list[tuple[int, str]]:
    """``lockgate serve`` on each store, all at once (a boot is mostly imports); each exit code and output."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "lockgate.cli", "serve", "tests.cluster.app:app", "--store", store, "--no-http"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        for store in stores
    ]
    return [(proc.wait(timeout=60), proc.communicate()[0]) for proc in procs]


def test_a_standby_or_no_reachable_primary_is_one_clear_line(pair: Replicas) -> None:
    pair.ensure_standby()
    standby = pair.standby
    hosts = f"postgresql://postgres@127.0.0.1:{standby.port},127.0.0.1:{free_port()}/postgres"
    (code, said), (code2, said2) = _serve_lines(standby.url(), f"{hosts}?target_session_attrs=read-write")
    assert code != 0 and "Traceback" not in said, said
    assert f"127.0.0.1:{standby.port}/postgres is a standby (in recovery) and takes no writes" in said, said
    assert code2 != 0 and "Traceback" not in said2, said2
    lines = [line for line in said2.splitlines() if line.strip()]
    assert len(lines) == 1 and f"127.0.0.1:{standby.port} session is read-only" in lines[0], said2
    assert "Connection refused" in lines[0], said2
