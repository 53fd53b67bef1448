"""Wake-ups across processes: how soon a body starts in a worker process after another process acts.

    python -m bench.wakeups                                              # SQLite, a scratch file
    python -m bench.wakeups --store postgresql://postgres@127.0.0.1:5432/postgres

A worker process (an ``Engine``, by default with the default ``poll_interval`` of 0.5 s: ``--poll``)
executes the runs, or ``--workers`` of them, each hearing every wake-up;
this process acts on the same store, ``--n`` times per case, one after the other:

(start)    ``Client.start`` of a workflow only the worker executes -> its body starts there;
(signal)   ``Client.signal`` to a run parked in its ``wait_for_signal`` -> the body goes on there;
(publish)  ``Client.publish`` of an event a trigger turns into a start -> that run's body starts;
(slot)     ``Client.cancel`` of a run holding the one slot of a ``Concurrency(limit=1)`` key -> the
           start parked behind it is admitted and its body starts in the worker.
(result)   ``Client.start`` then ``handle.result()`` of the (start) case's workflow: from its body
           starting in the worker to the result here (the run's end committed there, and this
           process learning of it).

Each latency is wall-clock time from just before the call here to the
worker's body; p50/p99 in ms. ``idle cpu`` is the worker's CPU time over ``--idle`` seconds
with nothing to do, as a percentage of one core: what waiting for wake-ups costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import lockgate as lg

from .core import Place, _cpu_s, _folder, _pct
from .report import Cell, machine, print_table, write_json

__all__ = ["main"]

HERE = Path(__file__).resolve().parent


class Mark(BaseModel):
    i: int


class Key(BaseModel):
    id: str


class Gated(BaseModel):
    i: int
    hold: bool


def worker_app() -> lg.App:
    """What the worker executes: each body reports its start on stdout as ``{"case", "i", "t"}``."""
    app = lg.App("bench-wakeups")
    ping = app.event("bench.ping", key=Key, payload=Mark)

    def report(case: str, i: int) -> None:
        print(json.dumps({"case": case, "i": i, "t": time.time()}), flush=True)

    @app.workflow(name="bench.start")
    async def start(ctx: lg.Context, p: Mark) -> None:
        report("start", p.i)

    @app.workflow(name="bench.signal")
    async def signal(ctx: lg.Context, p: Mark) -> None:
        report("parked", p.i)
        await ctx.wait_for_signal("go", Mark)
        report("signal", p.i)

    @app.workflow(name="bench.publish")
    async def published(ctx: lg.Context, p: Mark) -> None:
        report("publish", p.i)

    @app.workflow(name="bench.gated", concurrency=lg.Concurrency(limit=1, key=lambda p: "k"))
    async def gated(ctx: lg.Context, p: Gated) -> None:
        if p.hold:
            report("holding", p.i)
            await ctx.wait_for_signal("never", Mark)
        report("slot", p.i)

    app.trigger(on=ping, workflow="bench.publish", payload=lambda ev: {"i": ev.data.i})
    return app


async def _worker(url: str, poll: float) -> None:
    async with lg.Engine(worker_app(), url, poll_interval=poll):
        print(json.dumps({"case": "ready", "i": os.getpid()}), flush=True)
        await asyncio.Event().wait()


class Worker:
    """The worker processes and the body starts they report (whichever executed each)."""

    def __init__(self, procs: list[asyncio.subprocess.Process]) -> None:
        self.procs = procs
        self.seen: dict[tuple[str, int], float] = {}
        self._changed = asyncio.Event()
        self._readers = [asyncio.create_task(self._read(proc)) for proc in procs]

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            with contextlib.suppress(ValueError):
                mark = json.loads(line)
                self.seen[(mark["case"], mark.get("i", 0))] = mark.get("t", 0.0)
                self._changed.set()

    def cpu_s(self) -> float:
        return sum(_cpu_s(proc.pid) for proc in self.procs)

    async def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            await proc.wait()

    async def wait(self, case: str, i: int = 0, timeout: float = 30.0) -> float:
        async with asyncio.timeout(timeout):
            while (case, i) not in self.seen:
                self._changed.clear()
                await self._changed.wait()
        return self.seen[(case, i)]


async def _spawn(url: str, poll: float, count: int) -> Worker:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "bench.wakeups", "--worker", url, "--poll", str(poll)]
    procs = [await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, env=env) for _ in range(count)]
    worker = Worker(procs)
    for proc in procs:
        await worker.wait("ready", proc.pid, timeout=120)
    return worker


def _summary(latencies: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in latencies)
    return {"p50_ms": _pct(ms, 50), "p99_ms": _pct(ms, 99), "max_ms": ms[-1], "n": len(ms)}


async def measure(url: str, n: int, idle: float, poll: float, workers: int = 1) -> dict[str, Any]:
    app = worker_app()
    async with lg.Client(app, url) as client:  # migrates before the workers open the store
        worker = await _spawn(url, poll, workers)
        try:
            await asyncio.sleep(0.5)
            began = _transactions(url)
            cpu0, wall0 = worker.cpu_s(), time.monotonic()
            await asyncio.sleep(idle)
            idle_cpu = (worker.cpu_s() - cpu0) / (time.monotonic() - wall0) * 100
            out: dict[str, Any] = {"idle_cpu_pct": idle_cpu}
            lat: list[float] = []
            for i in range(n):
                t0 = time.time()
                await client.start("bench.start", {"i": i})
                lat.append(await worker.wait("start", i) - t0)
            out["start"] = _summary(lat)
            lat = []
            for i in range(n, 2 * n):  # ids past the (start) case's
                handle = await client.start("bench.start", {"i": i})
                await handle.result(timeout=30)
                lat.append(time.time() - await worker.wait("start", i))
            out["result"] = _summary(lat)
            lat = []
            for i in range(n):
                handle = await client.start("bench.signal", {"i": i})
                assert handle.run_id is not None
                await worker.wait("parked", i)
                while (await client.get_run(handle.run_id)).waiting_on is None:  # parked, not only entered
                    await asyncio.sleep(0.005)
                t0 = time.time()
                await client.signal(handle.run_id, "go", {"i": i})
                lat.append(await worker.wait("signal", i) - t0)
            out["signal"] = _summary(lat)
            lat = []
            for i in range(n):
                t0 = time.time()
                await client.publish("bench.ping", {"id": str(i)}, {"i": i})
                lat.append(await worker.wait("publish", i) - t0)
            out["publish"] = _summary(lat)
            out["slot"] = await _slots(client, worker, n)
        finally:
            await worker.stop()
        if began is not None:  # the workers' sessions have ended: their counts are in (the client's lag up to 1 s)
            await asyncio.sleep(1.1)
            out["server_transactions"] = (_transactions(url) or 0) - began
    return out


def _transactions(url: str) -> int | None:
    """The transactions PostgreSQL counted in this database (None on SQLite): what every process's claims,
    looks and writes cost the server."""
    if not url.startswith("postgresql"):
        return None
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


async def _slots(client: lg.Client, worker: Worker, n: int) -> dict[str, Any]:
    lat: list[float] = []
    for i in range(n):
        holder = await client.start("bench.gated", {"i": i, "hold": True})
        held = holder.run_id or await client.admitted_run(holder.ticket, timeout=30)  # after the last one's end
        await worker.wait("holding", i)
        await client.start("bench.gated", {"i": i, "hold": False})  # parked behind the holder
        while (await client.get_run(held)).waiting_on is None:
            await asyncio.sleep(0.005)
        t0 = time.time()
        await client.cancel(held)
        lat.append(await worker.wait("slot", i) - t0)
    return _summary(lat)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.wakeups", description=__doc__.split("\n")[0])
    parser.add_argument("--store", default="sqlite", help="'sqlite' (a scratch file) or a PostgreSQL server URL")
    parser.add_argument("--n", type=int, default=200, help="wake-ups measured per case")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds the idle worker's CPU is measured over")
    parser.add_argument("--folder", help="where the SQLite file goes (default: a scratch folder beside bench/)")
    parser.add_argument("--json", default=str(HERE / "results" / "wakeups.json"))
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--poll", type=float, default=0.5, help="the worker's poll_interval (its default: 0.5)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes, each hearing every wake-up")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> int:
    if args.worker:
        await _worker(args.worker, args.poll)
        return 0
    with _folder(args.folder) as folder:
        sqlite = args.store == "sqlite"
        place = Place("sqlite" if sqlite else "postgres", "full", folder, None if sqlite else args.store)
        try:
            result = await measure(place.url("wakeups"), args.n, args.idle, args.poll, args.workers)
        finally:
            place.cleanup()
    rows: list[list[Cell]] = [
        [case, result[case].get("p50_ms"), result[case].get("p99_ms"), result[case].get("max_ms")]
        for case in ("start", "signal", "publish", "slot", "result")
    ]
    rows.append(["idle cpu (% of a core, all workers)", result["idle_cpu_pct"], None, None])
    if "server_transactions" in result:
        rows.append(["server transactions, all cases", result["server_transactions"], None, None])
    print_table(
        f"wake-ups across processes ({place.store}, n={args.n}, poll_interval={args.poll}, workers={args.workers})",
        ["case", "p50 ms", "p99 ms", "max ms"],
        rows,
        plain=args.plain,
    )
    write_json(
        args.json,
        {"machine": machine(), "store": place.store, "n": args.n, "poll": args.poll, "workers": args.workers}
        | {"results": result},
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(_main(_parse(argv)))


if __name__ == "__main__":
    sys.exit(main())
