"""Schedules fired by real processes: one engine on each store in real time, and three
``lockgate serve`` processes on PostgreSQL of which one is killed with ``kill -9``."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg

from .cluster.harness import Cluster, until
from .cluster.runtime_schedules_app import app as runtime_app
from .conftest import LONG


class Slot(BaseModel):
    at: str


def every_second_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="rt.tick")
    async def tick(ctx: lg.Context, p: Slot) -> str:
        return p.at

    app.schedule("rt", workflow=tick, every="1s", payload=lambda at: {"at": at.isoformat()})
    return app


async def test_an_engine_fires_an_every_second_schedule_in_real_time(make_engine: Any) -> None:
    async with make_engine(every_second_app()) as engine:
        await asyncio.sleep(3.2)
        firings = await engine.schedule_firings("rt")
    assert len(firings) >= 2
    slots = [f.scheduled_at for f in firings]
    assert len(set(slots)) == len(slots)
    assert all(f.cause == "cron" and f.status in ("started", "succeeded") for f in firings)
    lag = [(f.claimed_at - f.scheduled_at).total_seconds() for f in firings]
    assert max(lag) < 1.5


@pytest.mark.slow
@pytest.mark.timeout(240)  # the workers' boot (up to ``ready``'s 90 s under load), 20 s of firing, the drain
async def test_three_processes_fire_each_second_once_through_a_kill_9(cluster: Cluster) -> None:
    app_ref = "tests.cluster.schedules_app:app"
    workers = cluster.spawn(3, lease="2s", app=app_ref)
    await cluster.ready()
    started = time.time()
    await asyncio.sleep(10)
    holder = await cluster.fetch("SELECT owner FROM lockgate_sweep_leases WHERE name = 'schedules'")
    owners = await cluster.fetch("SELECT id, pid FROM lockgate_workers")
    pid = next((p for wid, p in owners if holder and wid == holder[0][0]), workers[0].pid)
    victim = cluster.by_pid(pid)  # the replica ticking the schedules: the worst one to lose
    victim.kill()
    await asyncio.sleep(10)
    stopped_firing = time.time()

    async def drained() -> bool:
        # The slots checked below, not the ones the schedule goes on firing meanwhile (some are always open),
        # and a later slot claimed: the sweep, claiming slots in order, is past every one checked (on a loaded
        # machine a slot due just before the stop may be claimed after it).
        rows = await cluster.fetch(
            "SELECT COUNT(*) FILTER (WHERE scheduled_at <= %s AND status IN ('claimed', 'buffered', 'started')),"
            " COUNT(*) FILTER (WHERE scheduled_at > %s) FROM lockgate_schedule_firings"
            " WHERE schedule = 'every-second'",
            stopped_firing,
            stopped_firing,
        )
        return bool(rows[0][0] == 0 and rows[0][1] > 0)

    await until(drained, timeout=60, what="the firings up to the stop settled")
    for worker in cluster.workers:
        worker.stop()
    for worker in cluster.workers:
        await worker.wait()
    firings = await cluster.fetch(
        "SELECT scheduled_at, status, run_id FROM lockgate_schedule_firings WHERE schedule = 'every-second' "
        "AND scheduled_at <= %s ORDER BY scheduled_at",
        stopped_firing,
    )
    runs = await cluster.fetch("SELECT payload, status FROM lockgate_runs WHERE workflow = 'cluster.tick'")
    by_slot = Counter(datetime.fromisoformat(payload.split('"')[3]).timestamp() for payload, _ in runs)
    slots = [float(s) for s, _, _ in firings]
    assert len(slots) >= 15, cluster.logs()
    assert by_slot.most_common(1)[0][1] == 1, "a slot started twice"
    # Every second from the first slot to the last fired, once: none lost to the kill.
    assert slots == [slots[0] + i for i in range(len(slots))], cluster.logs()
    assert set(slots) <= set(by_slot), "a firing without its run"
    assert {status for _, status, _ in firings} == {"succeeded"}, firings
    assert slots[0] - started < 5


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_three_processes_fire_runtime_schedules_once_through_a_kill_9(cluster: Cluster) -> None:
    """Runtime schedules every second on three ``lockgate serve`` processes, the sweep's holder killed
    halfway: every slot of every schedule fires once (50 for 10 s; LOCKGATE_TORTURE=long: 1,000 for a minute)."""
    count, span = (1000, 60.0) if LONG else (50, 10.0)
    # Each schedule buffers its next slot while its run is live, so its runs must end about as fast as its
    # slots come: at 1,000 a second a process needs room for more runs in flight than the default 100.
    runs_each = 500 if LONG else 100
    cluster.spawn(3, lease="2s", max_runs=runs_each, app="tests.cluster.runtime_schedules_app:app")
    await cluster.ready()
    async with lg.Client(runtime_app, cluster.url) as client:
        created = time.time()
        for i in range(count):
            await client.schedules.create(
                f"tenant:{i:04d}", workflow="cluster.digest", every="1s", payload={"tenant": i},
                on_overlap="buffer", buffer_limit=1000,
            )  # fmt: skip
        await asyncio.sleep(span / 2)
        holder = await cluster.fetch("SELECT owner FROM lockgate_sweep_leases WHERE name = 'schedules'")
        owners = await cluster.fetch("SELECT id, pid FROM lockgate_workers")
        pid = next(p for wid, p in owners if holder and wid == holder[0][0])
        cluster.by_pid(pid).kill()  # the replica ticking the schedules: the worst one to lose
        await asyncio.sleep(span / 2)
        cutoff = float(int(time.time()) - 2)

        async def settled() -> bool:
            rows = await cluster.fetch(
                "SELECT COUNT(*) FROM lockgate_schedule_firings WHERE scheduled_at <= %s AND status <> 'succeeded'",
                cutoff,
            )
            return rows[0][0] == 0

        try:
            await until(settled, timeout=90, what="firings up to the cutoff succeeded")
        except TimeoutError:
            left = await cluster.fetch(
                "SELECT status, COUNT(*) FROM lockgate_schedule_firings WHERE scheduled_at <= %s GROUP BY 1", cutoff
            )
            raise AssertionError(f"{cluster.logs()[-3000:]}\nfirings up to the cutoff by status: {left}") from None
        for i in range(count):
            await client.schedules.delete(f"tenant:{i:04d}")
    firings = await cluster.fetch(
        "SELECT schedule, scheduled_at, claimed_at, started_at FROM lockgate_schedule_firings "
        "WHERE scheduled_at <= %s ORDER BY 1, 2",
        cutoff,
    )
    if LONG:  # the figures of the full-size run (read with -s; nothing is asserted on them)
        print(_lags(firings, cutoff - created))
    dupes = await cluster.fetch(
        "SELECT identity FROM lockgate_runs WHERE workflow = 'cluster.digest' GROUP BY identity HAVING COUNT(*) > 1"
    )
    assert dupes == [], "a slot started twice"
    by_schedule: dict[str, list[float]] = {}
    for name, slot, _, _ in firings:
        by_schedule.setdefault(name, []).append(float(slot))
    assert len(by_schedule) == count, cluster.logs()
    for name, slots in by_schedule.items():
        # Every second from its first slot (just after it was created) to the cutoff, once: none lost to the kill.
        assert slots[0] <= created + 2 + count / 50, (name, slots[0] - created)
        assert slots == [slots[0] + i for i in range(int(cutoff - slots[0]) + 1)], (name, slots)


def _lags(firings: list[tuple[Any, ...]], span: float) -> str:
    """Slots fired per second, and each firing's lag behind its slot at its claim and at its start."""
    claim = sorted(float(c) - float(s) for _, s, c, _ in firings)
    start = sorted(float(t) - float(s) for _, s, _, t in firings if t is not None)

    def pct(values: list[float], p: float) -> str:
        return f"{values[min(len(values) - 1, int(p * len(values)))]:.2f}" if values else "-"

    return (
        f"{len(firings)} slots in {span:.0f} s ({len(firings) / span:.0f}/s); claim lag p50/p99 "
        f"{pct(claim, 0.5)}/{pct(claim, 0.99)} s, start lag p50/p99 {pct(start, 0.5)}/{pct(start, 0.99)} s"
    )
