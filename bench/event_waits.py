"""Event-wait and webhook figures for ``bench.events``: publish -> waiting run resumes, webhook requests/s.

(d) in-process: ``--waiters`` runs park in ``ctx.wait_for_event`` on distinct keys in an ``Engine``
    here; then ``--resumes`` publishes, one after the other, each timed until its run's body goes on
    past the wait: p50/p99 ms. Each publish waits (untimed) for the previous run's end to commit, as
    the cross-process case spaces its publishes: a latency, not a queue behind the last run's commit.
(e) cross-process: the same, with the runs executed by a worker subprocess (``python -m
    bench.event_waits --worker URL``) and the publishes made by a ``Client`` here; each run returns
    the monotonic time it resumed at (one clock for every process of the machine).
(f) webhooks: ``--hooks`` GitHub-signed deliveries posted over real HTTP (uvicorn, 20 at a time)
    to ``POST /hooks/{name}``, each verified, deduplicated and published: requests/s.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

import lockgate as lg
from lockgate.http import AccessPolicy, create_app
from lockgate.http.serving import bind_socket, serve_http
from lockgate.store import event_waits

from .core import _pct

__all__ = ["case_hooks", "case_wait_cross", "case_wait_local"]

ROOT = Path(__file__).resolve().parents[1]
SECRET_ENV = "BENCH_HOOK_SECRET"
SECRET = "bench-secret-0123456789"


class Order(BaseModel):
    order_id: str


class Shipped(BaseModel):
    order_id: str
    carrier: str = "ups"


def build_app(resumed: dict[str, float]) -> tuple[lg.App, lg.EventDef]:
    app = lg.App("bench-waits")
    shipped = app.event("bench.shipped", payload=Shipped)

    @app.workflow(name="bench.waiter")
    async def waiter(ctx: lg.Context, p: Order) -> float:
        await ctx.wait_for_event(shipped, match={"order_id": p.order_id})
        at = time.perf_counter()
        resumed.setdefault(p.order_id, at)
        return at

    app.webhook(
        "bench",
        event=shipped,
        verify=lg.HmacSignature.github(secret=f"env:{SECRET_ENV}"),
        dedupe="X-GitHub-Delivery",
    )
    return app, shipped


async def _start_waiters(client: lg.Client, n: int) -> list[str]:
    sem = asyncio.Semaphore(100)

    async def one(i: int) -> str:
        async with sem:
            handle = await client.start("bench.waiter", {"order_id": f"o{i}"})
            assert handle.run_id is not None
            return handle.run_id

    return await asyncio.gather(*(one(i) for i in range(n)))


async def _parked(client: lg.Client, n: int, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        rows = await client.store.read(event_waits.waiting_per_event, "bench.waiter")
        if sum(int(r["waiting"]) for r in rows) >= n:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not every run parked in {timeout}s: {rows}")
        await asyncio.sleep(0.2)


def _picks(n: int, m: int) -> list[int]:
    """``m`` of the ``n`` waiting runs, spread across them."""
    return sorted({(i * n) // m for i in range(m)})


async def case_wait_local(url: str, waiters: int, resumes: int, poll: float) -> list[float]:
    """Milliseconds from each publish to its waiting run's body going on, all in this process."""
    resumed: dict[str, float] = {}
    app, shipped = build_app(resumed)
    os.environ.setdefault(SECRET_ENV, SECRET)
    out = []
    async with lg.Engine(app, url, poll_interval=poll, max_concurrent_runs=500) as engine:
        run_ids = await _start_waiters(engine.client, waiters)
        await _parked(engine.client, waiters)
        for i in _picks(waiters, resumes):
            key = f"o{i}"
            start = time.perf_counter()
            await engine.publish(shipped, None, {"order_id": key})
            while key not in resumed:
                await asyncio.sleep(0.0005)
            out.append((resumed[key] - start) * 1000)
            await engine.result(run_ids[i], timeout=60)  # its end committed: the next publish does not queue behind it
    return out


async def case_wait_cross(url: str, waiters: int, resumes: int, poll: float) -> list[float]:
    """The same with the runs in a worker subprocess and the publishes made here."""
    app, shipped = build_app({})
    os.environ.setdefault(SECRET_ENV, SECRET)
    async with lg.Client(app, url) as client:
        run_ids = await _start_waiters(client, waiters)
        # the worker runs the lockgate this process imported (a base tree's when comparing), not this tree's
        lockgate_src = Path(lg.__file__).resolve().parents[1]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(lockgate_src)])}
        cmd = [sys.executable, "-m", "bench.event_waits", "--worker", url, "--poll", str(poll)]
        worker = subprocess.Popen(cmd, cwd=ROOT, env=env)
        try:
            await _parked(client, waiters)
            sent: dict[int, float] = {}
            for i in _picks(waiters, resumes):
                sent[i] = time.perf_counter()
                await client.publish(shipped, None, {"order_id": f"o{i}"})
                await asyncio.sleep(0.02)  # one at a time: latency, not a burst's queueing
            out = []
            for i, start in sent.items():
                resumed_at = await client.result(run_ids[i], timeout=60)
                out.append((float(resumed_at) - start) * 1000)
            return out
        finally:
            worker.terminate()
            worker.wait(timeout=60)


async def _connection(port: int, bodies: list[tuple[bytes, dict[str, str]]]) -> None:
    """POST ``bodies`` to ``/hooks/bench`` over one kept-alive HTTP/1.1 connection (a bare client: the
    figure is the server's, not a client library's)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for body, headers in bodies:
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            writer.write(
                f"POST /hooks/bench HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode()
                + body
            )
            await writer.drain()
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            answer = await reader.readexactly(length)
            if b" 200 " not in status:
                raise AssertionError(f"{status!r} {answer!r}")
    finally:
        writer.close()


def _signed(i: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"order_id": f"h{i}"}).encode()
    sig = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-Hub-Signature-256": f"sha256={sig}",
        "X-GitHub-Delivery": f"d-{i}",
        "Content-Type": "application/json",
    }
    return body, headers


async def case_hooks(url: str, n: int, connections: int = 20) -> float:
    """Signed webhook deliveries per second over real HTTP (``connections`` at once), each published once."""
    os.environ[SECRET_ENV] = SECRET
    app, _ = build_app({})
    async with lg.Client(app, url) as client:
        sock = bind_socket("127.0.0.1", 0)
        port = sock.getsockname()[1]
        server = asyncio.ensure_future(serve_http(create_app(client, policy=AccessPolicy()), "127.0.0.1", port, sock))
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
                for _ in range(200):
                    try:
                        await http.get("/api/v1/healthz")
                        break
                    except httpx.TransportError:
                        await asyncio.sleep(0.05)
            await _connection(port, [_signed(-1)])  # warm
            work = [_signed(i) for i in range(n)]
            start = time.perf_counter()
            await asyncio.gather(*(_connection(port, work[c::connections]) for c in range(connections)))
            return n / (time.perf_counter() - start)
        finally:
            server.cancel()
            try:
                await server
            except (asyncio.CancelledError, Exception):
                pass


def summary(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {"p50": _pct(ordered, 50), "p99": _pct(ordered, 99), "n": len(ordered)}


async def _worker(url: str, poll: float) -> None:
    app, _ = build_app({})
    async with lg.Engine(app, url, poll_interval=poll, max_concurrent_runs=500):
        await asyncio.Event().wait()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--worker":
        os.environ.setdefault(SECRET_ENV, SECRET)
        poll = float(sys.argv[4]) if len(sys.argv) >= 5 else 0.5
        try:
            asyncio.run(_worker(sys.argv[2], poll))
        except KeyboardInterrupt:
            pass
