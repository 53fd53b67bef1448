"""The soak: three ``lockgate serve`` processes on a private PostgreSQL, a mixed load, and ``kill -9``.

A driver starts work of every kind the gate and the engine know for ``seconds``; a killer
sends ``kill -9`` to a random worker every few seconds and starts a new one in its place.
Then the load stops, the cluster settles, and ``checks.check`` reads every invariant back.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lockgate as lg

from ..cluster.harness import Cluster, Worker, until
from ..pgserver import PrivatePostgres
from .app import SCHEMA, app, ping
from .checks import Arrival, Report, check

__all__ = ["Soak", "soak"]

APP_REF = "tests.soak.app:app"
ARGS = ("--no-http",)

# (workflow, weight, keys): what the driver starts, how often, under which keys.
MIX: list[tuple[str, int, int]] = [
    ("soak.plain", 3, 0),
    ("soak.multi", 2, 0),
    ("soak.debounced", 3, 3),
    ("soak.limited", 3, 3),
    ("soak.throttled", 2, 1),
    ("soak.rated", 3, 1),
    ("soak.batched", 3, 2),
    ("soak.flowed", 3, 0),
    ("event", 2, 0),
]


@dataclass
class Soak:
    """How long, how hard: ``seconds`` of load at ``rate`` arrivals a second, a kill every ``kill_every`` s."""

    seconds: float = 60.0
    rate: float = 4.0
    kill_every: float = 3.0
    workers: int = 3
    lease: str = "2s"
    settle_timeout: float = 180.0
    seed: int | None = None


class _Load:
    def __init__(self, client: lg.Client, rng: random.Random) -> None:
        self.client = client
        self.rng = rng
        self.arrivals: list[Arrival] = []
        self.events: list[str] = []
        self.errors: list[str] = []
        self.signals: set[asyncio.Task[None]] = set()
        self.n = 0

    async def burst(self) -> None:
        """One arrival, or (one time in four) a burst of several of one workflow and key at once."""
        workflow, _, keys = self.rng.choices(MIX, weights=[w for _, w, _ in MIX])[0]
        key = f"{workflow.split('.')[-1][0]}{self.rng.randrange(keys)}" if keys else ""
        size = self.rng.randint(3, 8) if self.rng.random() < 0.25 else 1
        await asyncio.gather(*(self.one(workflow, key) for _ in range(size)))

    async def one(self, workflow: str, key: str) -> None:
        self.n += 1
        n = self.n
        try:
            if workflow == "event":
                self.events.append(await self.client.publish(ping, {"id": f"e{n}"}, {"n": n}))
                return
            payload = {"n": n, "key": key} if key else {"n": n}
            handle = await self.client.start(workflow, payload)
        except Exception as exc:
            self.errors.append(f"{workflow}: {type(exc).__name__}: {exc}")
            return
        self.arrivals.append(Arrival(workflow, handle.ticket, handle.status, handle.run_id, n))
        if workflow == "soak.multi" and handle.run_id is not None:
            task = asyncio.create_task(self._signal_later(handle.run_id))
            self.signals.add(task)
            task.add_done_callback(self.signals.discard)

    async def _signal_later(self, run_id: str) -> None:
        await asyncio.sleep(self.rng.uniform(0.1, 2.0))
        try:
            await self.client.signal(run_id, "go", {"ok": True})
        except Exception as exc:
            self.errors.append(f"signal {run_id}: {type(exc).__name__}: {exc}")

    async def drive(self, rate: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.burst()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.expovariate(rate))


async def _killer(cluster: Cluster, config: Soak, rng: random.Random, stop: asyncio.Event) -> list[tuple[int, float]]:
    kills: list[tuple[int, float]] = []
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), config.kill_every * rng.uniform(0.5, 1.5))
        if stop.is_set():
            break
        alive = [w for w in cluster.workers if w.alive()]
        if alive:
            victim = rng.choice(alive)
            kills.append((victim.pid, victim.kill()))
        cluster.spawn(
            max(0, config.workers - len([w for w in cluster.workers if w.alive()])),
            lease=config.lease,
            app=APP_REF,
            args=ARGS,
        )
    return kills


async def _settle(cluster: Cluster, client: lg.Client, stopped: float, timeout: float) -> tuple[int, str | None]:
    """Wait until everything started before ``stopped`` has ended; resume crash-looped runs.

    How many were resumed, and what was left unsettled at the deadline (``None``: nothing).
    """
    resumed = 0
    left: list[Any] = []

    async def settled() -> bool:
        nonlocal resumed
        for (run_id,) in await cluster.fetch(
            "SELECT id FROM lockgate_runs WHERE status = 'suspended' AND error_tag = 'WorkflowCrashLooped'"
        ):
            await client.resume(run_id)  # kill -9 three times in a row: the engine's crash-loop guard
            resumed += 1
        rows = await cluster.fetch(
            "SELECT (SELECT COUNT(*) FROM lockgate_pending),"
            " (SELECT COUNT(*) FROM lockgate_runs WHERE status IN ('running', 'suspended')"
            "    AND (workflow <> 'soak.tick' OR created_at <= %s)),"
            " (SELECT COUNT(*) FROM lockgate_deliveries WHERE status = 'pending'),"
            " (SELECT COUNT(*) FROM lockgate_schedule_firings WHERE status IN ('claimed', 'buffered', 'started')"
            "    AND scheduled_at <= %s)",
            stopped,
            stopped,
        )
        left[:] = rows[0]
        return not any(rows[0])

    try:
        await until(settled, timeout=timeout, what="the load settled")
    except TimeoutError:
        parked, live, deliveries, firings = left
        return resumed, f"parked {parked}, live runs {live}, pending deliveries {deliveries}, open firings {firings}"
    return resumed, None


async def soak(server: PrivatePostgres, log_dir: Path, config: Soak, *, say: bool = False) -> Report:
    """Run the soak on a new database of ``server``; the report of its checks."""
    rng = random.Random(config.seed)
    url = server.create_database("soak")
    cluster = Cluster(url, log_dir)
    async with lg.Client(app, url) as client:  # opening migrates the database
        await cluster.setup()
        await cluster.execute(SCHEMA)
        try:
            cluster.spawn(config.workers, lease=config.lease, app=APP_REF, args=ARGS)
            await cluster.ready()
            load = _Load(client, rng)
            stop = asyncio.Event()
            began = time.time()
            killer = asyncio.create_task(_killer(cluster, config, rng, stop))
            driver = asyncio.create_task(load.drive(config.rate, stop))
            await asyncio.sleep(config.seconds)
            stop.set()
            kills = await killer
            await driver
            stopped = time.time()
            if load.signals:
                await asyncio.wait(set(load.signals))
            if say:
                print(f"load stopped after {stopped - began:.0f}s: {len(load.arrivals)} starts, {len(kills)} kills")
            resumed, unsettled = await _settle(cluster, client, stopped, config.settle_timeout)
        finally:
            await cluster.close()
        report = await check(cluster, load.arrivals, load.events, kills, (began, stopped), resumed)
    report.figures["load (s)"] = round(stopped - began, 1)
    report.figures["workers started"] = len(cluster.workers)
    report.fail("driver errors", load.errors)
    report.fail(f"not settled {config.settle_timeout:g}s after the load stopped", [unsettled] if unsettled else [])
    report.fail("tracebacks in worker logs", [w.name for w in cluster.workers if _traceback(w)])
    return report


def _traceback(worker: Worker) -> bool:
    return "Traceback" in worker.log()
