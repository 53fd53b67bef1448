"""Run stream figures: chunks/s written, and chunk -> reader latency over Server-Sent Events.

    python -m bench.streams                      # SQLite (synchronous FULL)
    python -m bench.streams --store postgresql://postgres@127.0.0.1:5432/postgres

Cases, each on a fresh database, with an ``Engine`` in this process:

- ``one run``: one run streams ``--chunks`` chunks from a step (a token source that yields to the
  event loop between tokens, as an LLM client does), timed from its first chunk to its end: every
  chunk committed (chunks/s).
- ``100 runs``: 100 runs stream ``--chunks`` chunks between them at once (aggregate chunks/s).
- ``latency``: ``--readers`` Server-Sent Events connections (a reader subprocess, raw HTTP/1.1, one
  connection each) follow one run through the real HTTP API (uvicorn) while it streams
  ``--rate`` chunks/s for ``--seconds``; each chunk carries the monotonic time ``ctx.stream`` was
  called (before its commit, so an upper bound of commit -> receipt), each reader the time the
  chunk's event arrived: p50/p99 ms over every (chunk, reader).
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
from lockgate.http import bind_socket, create_app, serve_http

from .core import Place, _folder, _pct, one_place
from .report import Cell, machine, print_table, write_json

__all__ = ["main"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGETS = {"sqlite": 5_000.0, "postgres": 2_000.0}  # aggregate chunks/s (100 runs); p99 <= 100 ms
P99_TARGET_MS = 100.0


class Job(BaseModel):
    n: int
    rate: float = 0.0  # chunks per second (0: as fast as the loop turns)


class Go(BaseModel):
    ok: bool = True


def build_app() -> lg.App:
    app = lg.App("bench-streams")

    @app.workflow(name="bench.stream")
    async def stream(ctx: lg.Context, p: Job) -> float:
        async def tokens() -> float:
            started = time.perf_counter()
            for i in range(p.n):
                await ctx.stream(f"tok{i} ")
                await asyncio.sleep(0)  # a token source yields between tokens
            return started

        return float(await ctx.step("tokens", tokens))

    @app.workflow(name="bench.paced")
    async def paced(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)  # the readers are connected

        async def tokens() -> int:
            start = time.monotonic()
            for i in range(p.n):
                due = start + i / p.rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                await ctx.stream({"i": i, "t": time.monotonic()})
            return p.n

        return int(await ctx.step("tokens", tokens))

    return app


async def case_throughput(url: str, runs: int, chunks: int) -> float:
    """Chunks/s when ``runs`` runs stream ``chunks`` chunks between them at once."""
    async with lg.Engine(build_app(), url, max_concurrent_runs=max(200, runs)) as engine:
        each = chunks // runs
        handles = await asyncio.gather(*(engine.start("bench.stream", {"n": each}) for _ in range(runs)))
        starts = [float(await h.result(timeout=600)) for h in handles]
        ended = time.perf_counter()
    return each * runs / (ended - min(starts))


async def case_latency(url: str, readers: int, rate: float, seconds: float) -> list[float]:
    """Milliseconds from ``ctx.stream`` to each SSE reader's receipt, over real HTTP."""
    async with lg.Engine(build_app(), url) as engine:
        sock = bind_socket("127.0.0.1", 0)
        port = sock.getsockname()[1]
        server = asyncio.create_task(serve_http(create_app(engine.client, dashboard=False), "127.0.0.1", port, sock))
        n = int(rate * seconds)
        handle = await engine.start("bench.paced", {"n": n, "rate": rate})
        assert handle.run_id is not None
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
        cmd = [sys.executable, "-m", "bench.streams", "--read", f"127.0.0.1:{port}", handle.run_id, str(readers)]
        proc = await asyncio.create_subprocess_exec(
            *cmd, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 300)
            if line.strip() != b"ready":
                raise RuntimeError(f"the readers did not connect: {line!r}")
            await engine.signal(handle.run_id, "go", {})
            await handle.result(timeout=seconds + 120)
            out, _ = await asyncio.wait_for(proc.communicate(), 120)
        finally:
            if proc.returncode is None:
                proc.kill()
            server.cancel()
            with contextlib.suppress(BaseException):
                await server
    found: list[float] = json.loads(out)
    if len(found) != n * readers:
        raise RuntimeError(f"{len(found)} receipts, expected {n * readers}")
    return found


async def _one_reader(host: str, port: int, run_id: str, ready: asyncio.Event, out: list[float]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    request = f"GET /api/v1/runs/{run_id}/stream HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n"
    writer.write(request.encode())
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"the stream answered {status!r}")
    connected = False
    while True:
        line = await reader.readline()
        if not line:
            break
        if not connected and line.startswith(b"retry:"):
            connected = True
            ready.set()
        if line.startswith(b"data: {") and b'"kind": "chunk"' in line:
            now = time.monotonic()
            out.append((now - json.loads(line[6:])["data"]["t"]) * 1000)
        elif line.startswith(b"event: end"):
            break
    writer.close()


async def read_main(address: str, run_id: str, readers: int) -> None:
    host, _, port = address.rpartition(":")
    out: list[float] = []
    events = [asyncio.Event() for _ in range(readers)]
    tasks = [asyncio.ensure_future(_one_reader(host, int(port), run_id, e, out)) for e in events]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 60)
    print("ready", flush=True)
    await asyncio.gather(*tasks)
    print(json.dumps(out), flush=True)


async def run(place: Place, args: argparse.Namespace) -> dict[str, Any]:
    one = await case_throughput(place.url("one"), 1, args.chunks)
    many = await case_throughput(place.url("many"), 100, args.chunks)
    latencies = sorted(await case_latency(place.url("latency"), args.readers, args.rate, args.seconds))
    return {
        "store": place.store,
        "chunks": args.chunks,
        "one_run_chunks_per_s": one,
        "hundred_runs_chunks_per_s": many,
        "target_chunks_per_s": TARGETS[place.store],
        "latency": {
            "readers": args.readers,
            "rate": args.rate,
            "seconds": args.seconds,
            "receipts": len(latencies),
            "p50_ms": _pct(latencies, 50),
            "p99_ms": _pct(latencies, 99),
            "max_ms": latencies[-1] if latencies else None,
            "target_p99_ms": P99_TARGET_MS,
        },
    }


def _rows(result: dict[str, Any]) -> list[list[Cell]]:
    target = result["target_chunks_per_s"]
    lat = result["latency"]
    met = "yes" if result["hundred_runs_chunks_per_s"] >= target else "no"
    return [
        ["one run", result["one_run_chunks_per_s"], "chunks/s", None, None],
        ["100 runs at once", result["hundred_runs_chunks_per_s"], "chunks/s", target, met],
        [f"stream -> SSE reader p50 ({lat['readers']} readers)", lat["p50_ms"], "ms", None, None],
        [
            f"stream -> SSE reader p99 ({lat['readers']} readers)",
            lat["p99_ms"],
            "ms",
            lat["target_p99_ms"],
            "yes" if lat["p99_ms"] <= lat["target_p99_ms"] else "no",
        ],
    ]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="sqlite", help="sqlite (default) or a postgresql:// server URL")
    parser.add_argument("--chunks", type=int, default=50_000, help="chunks per throughput case")
    parser.add_argument("--readers", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50.0, help="chunks/s of the latency case's run")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--dir", help="where SQLite files go (default: a scratch folder beside bench/)")
    parser.add_argument("--json", help="where the JSON goes (default: bench/results/streams-<store>.json)")
    parser.add_argument("--plain", action="store_true", help="plain text table")
    parser.add_argument("--read", nargs=3, metavar=("HOST:PORT", "RUN_ID", "N"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.read:
        asyncio.run(read_main(args.read[0], args.read[1], int(args.read[2])))
        return 0
    with _folder(args.dir) as folder:
        place = one_place(args.store, folder, "bench.streams")
        try:
            result = asyncio.run(run(place, args))
        finally:
            place.cleanup()
    print_table(
        f"lockgate run streams on {place.store}",
        ["case", "value", "unit", "target", "met"],
        _rows(result),
        plain=args.plain,
    )
    path = write_json(args.json or HERE / "results" / f"streams-{place.store}.json", {"machine": machine(), **result})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
