"""The side of one case that enqueues and measures, run in the peer's own environment:

    python -m bench.peers.apps.driver PEER CASE     # prints RESULT {json}
    python -m bench.peers.apps.driver - reset       # empties the probe's and the broker's Redis databases
    python -m bench.peers.apps.driver - floor       # Redis round trips/s: the floor of the Redis peers

Everything is read from the probe's records (``probe.py``), the same way for every peer; the
worker processes are the harness's (``bench/peers/run.py``). In case j5 the driver prints
``HOLDING <n>`` once ``n`` jobs are in flight, waits for a line on stdin (the harness has
killed and restarted the worker), then counts each job's completions in the side table.
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import inspect
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import redis

from . import probe

Enqueue = Callable[[str, list[int]], Awaitable[None] | None]
WARMUP_BASE = 1_000_000


def _env_int(name: str) -> int:
    return int(os.environ[name])


async def _enqueue(enqueue: Enqueue, kind: str, jobs: list[int]) -> None:
    result = enqueue(kind, jobs)
    if inspect.isawaitable(result):
        await result


def _done() -> int:
    return int(probe.redis_client().get("done") or 0)


async def _wait_done(count: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _done() < count:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.002)
    return True


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _max_in_window(starts: list[float], window: float) -> int:
    """The most starts in any half-open interval of ``window`` seconds (two pointers over sorted times)."""
    ordered = sorted(starts)
    best = lo = 0
    for hi, at in enumerate(ordered):
        while ordered[lo] <= at - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _most_overlapping(spans: list[tuple[float, float]]) -> int:
    """The most spans open at any instant (a span ending as another starts does not overlap it)."""
    edges = sorted([(start, 1) for start, _ in spans] + [(stop, -1) for _, stop in spans], key=lambda e: (e[0], e[1]))
    best = now = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def _slot_gaps(spans: list[tuple[float, float]]) -> list[float]:
    """Seconds from each body end (a slot freed) to the body start that took that slot next.

    Walked in time order: an end frees a slot, a start takes the slot freed longest ago. The
    first ``limit`` starts take slots no end freed, and slots still free when the line ran dry
    are not counted.
    """
    edges = sorted([(start, 1) for start, _ in spans] + [(stop, -1) for _, stop in spans], key=lambda e: (e[0], e[1]))
    free: collections.deque[float] = collections.deque()
    gaps: list[float] = []
    for at, step in edges:
        if step < 0:
            free.append(at)
        elif free:
            gaps.append(at - free.popleft())
    return gaps


def _spans() -> list[tuple[float, float]]:
    """Each job's body start and end, as the bodies read the clock (``probe.end``)."""
    out = []
    for raw in probe.redis_client().lrange("spans", 0, -1):
        start, stop = raw.split()
        out.append((float(start), float(stop)))
    return out


async def _warm_up(enqueue: Enqueue, count: int) -> None:
    """Jobs through every worker before the clock starts, then the records emptied."""
    await _enqueue(enqueue, "noop", [WARMUP_BASE + i for i in range(count)])
    if not await _wait_done(count, timeout=180):
        raise SystemExit(f"warm-up: {_done()} of {count} jobs done after 180 s")
    probe.redis_client().flushdb()


async def case_j1(enqueue: Enqueue, n: int) -> dict[str, Any]:
    started = time.perf_counter()
    await _enqueue(enqueue, "noop", list(range(n)))
    enqueued = time.perf_counter()
    finished = await _wait_done(n, timeout=600)
    ended = time.perf_counter()
    return {
        "value": n / (ended - started) if finished else None,
        "unit": "jobs/s",
        "jobs": n,
        "done": _done(),
        "enqueue_s": enqueued - started,
        "seconds": ended - started,
    }


async def case_j2(enqueue: Enqueue, n: int, cap_s: float) -> dict[str, Any]:
    client = probe.redis_client()
    latencies: list[float] = []
    timeouts = 0
    deadline = time.monotonic() + cap_s
    for i in range(n):
        started = time.perf_counter()
        await _enqueue(enqueue, "noop", [i])
        if client.blpop([f"done:{i}"], timeout=30) is None:
            timeouts += 1
            continue
        latencies.append((time.perf_counter() - started) * 1000)
        if time.monotonic() > deadline:
            break
    return {
        "value": _pct(latencies, 50) if latencies else None,
        "unit": "ms p50",
        "p99_ms": _pct(latencies, 99) if latencies else None,
        "mean_ms": sum(latencies) / len(latencies) if latencies else None,
        "jobs": len(latencies),
        "timeouts": timeouts,
        "capped": len(latencies) + timeouts < n,
    }


async def case_j3(enqueue: Enqueue, n: int, limit: int) -> dict[str, Any]:
    wall = time.time()
    started = time.perf_counter()
    await _enqueue(enqueue, "sleep", list(range(n)))
    enqueued = time.perf_counter()
    finished = await _wait_done(n, timeout=600)
    ended = time.perf_counter()
    spans = _spans()
    gaps = _slot_gaps(spans)
    busy = sum(stop - start for start, stop in spans)
    window = (max(stop for _, stop in spans) - min(start for start, _ in spans)) if spans else 0.0
    return {
        "value": n / (ended - started) if finished else None,
        "unit": "jobs/s",
        "jobs": n,
        "limit": limit,
        "max_in_flight": _most_overlapping(spans),  # from the bodies' own clocks
        "slot_use": busy / (limit * window) if window else None,  # body time over the limit's, first start to last end
        "gap_p50_ms": _pct(gaps, 50) * 1000 if gaps else None,  # a body's end to the next body's start
        "gap_p99_ms": _pct(gaps, 99) * 1000 if gaps else None,
        "max_in_flight_counted": int(probe.redis_client().get("max_inflight") or 0),  # Redis INCR/DECR
        "ideal_jobs_per_s": limit / probe.SLEEP_S,
        "enqueue_s": enqueued - started,
        "first_start_s": min(start for start, _ in spans) - wall if spans else None,  # the call to the first body
        "seconds": ended - started,
    }


async def case_j4(enqueue: Enqueue, n: int, rate: int) -> dict[str, Any]:
    await _enqueue(enqueue, "noop", list(range(n)))
    finished = await _wait_done(n, timeout=600)
    starts = [float(s) for s in probe.redis_client().lrange("starts", 0, -1)]
    span = max(starts) - min(starts) if len(starts) > 1 else 0.0
    return {
        "value": (len(starts) - 1) / span if finished and span else None,
        "unit": "jobs/s",
        "jobs": n,
        "rate": rate,
        "max_in_rolling_second": _max_in_window(starts, 1.0),
    }


def _side_counts(url: str) -> dict[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {int(job): int(runs) for job, runs in conn.execute("SELECT job, runs FROM peers_side").fetchall()}


async def case_j5(enqueue: Enqueue, n: int, wait_s: float, settle_s: float) -> dict[str, Any]:
    side = os.environ["PEERS_SIDE"]
    with psycopg.connect(side, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS peers_side")
        conn.execute("CREATE TABLE peers_side (job integer PRIMARY KEY, runs integer NOT NULL)")
    await _enqueue(enqueue, "hold", list(range(n)))
    client = probe.redis_client()
    # Kill once all are in flight, or once the number in flight stops growing (the worker is full).
    deadline = time.monotonic() + 120
    holding, grew_at = 0, time.monotonic()
    while holding < n and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        now_in = int(client.get("inflight") or 0)
        if now_in > holding:
            holding, grew_at = now_in, time.monotonic()
        elif holding and time.monotonic() - grew_at > min(2.0, probe.HOLD_S / 2):
            break
    holding = int(client.get("inflight") or 0)
    print(f"HOLDING {holding}", flush=True)
    sys.stdin.readline()  # the harness killed the worker and started it again
    restarted = time.monotonic()
    last_change, last_counts = restarted, _side_counts(side)
    while time.monotonic() - restarted < wait_s:
        await asyncio.sleep(0.5)
        counts = _side_counts(side)
        if counts != last_counts:
            last_change, last_counts = time.monotonic(), counts
        if len(counts) == n and time.monotonic() - last_change >= settle_s:
            break
    done_once = sum(1 for runs in last_counts.values() if runs >= 1)
    return {
        "value": n - done_once,
        "unit": "jobs lost",
        "jobs": n,
        "held_when_killed": holding,
        "lost": n - done_once,
        "run_twice": sum(1 for runs in last_counts.values() if runs > 1),
        "recovered_in_s": (last_change - restarted) if done_once else None,
        "watched_s": time.monotonic() - restarted,
    }


def _redis_floor(seconds: float = 1.0) -> dict[str, Any]:
    client = redis.Redis.from_url(os.environ["PEERS_PROBE"])
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        client.incr("floor")
        count += 1
    elapsed = time.perf_counter() - started
    client.flushdb()
    return {"store": "redis", "mode": "INCR round trip", "commits": count, "seconds": elapsed,
            "commits_per_s": count / elapsed, "us_per_commit": elapsed / count * 1e6}


async def run(peer: str, case: str) -> dict[str, Any]:
    enqueue: Enqueue = importlib.import_module(f"bench.peers.apps.{peer}_app").enqueue
    n = _env_int("PEERS_JOBS")
    await _warm_up(enqueue, _env_int("PEERS_WARMUP"))
    print("MEASURING", flush=True)  # the harness samples the workers' CPU and the store's commits from here
    if case == "j1":
        return await case_j1(enqueue, n)
    if case == "j2":
        return await case_j2(enqueue, n, float(os.environ["PEERS_CAP_S"]))
    if case == "j3":
        return await case_j3(enqueue, n, _env_int("PEERS_LIMIT"))
    if case == "j4":
        return await case_j4(enqueue, n, _env_int("PEERS_RATE_TARGET"))
    if case == "j5":
        return await case_j5(enqueue, n, float(os.environ["PEERS_J5_WAIT_S"]), float(os.environ["PEERS_SETTLE_S"]))
    raise SystemExit(f"unknown case {case!r}")


def main() -> None:
    peer, case = sys.argv[1], sys.argv[2]
    if case == "reset":
        for url in (os.environ["PEERS_PROBE"], os.environ["PEERS_BROKER"]):
            redis.Redis.from_url(url).flushdb()
        return
    if case == "floor":
        print("RESULT " + json.dumps(_redis_floor()), flush=True)
        return
    result = asyncio.run(run(peer, case))
    print("RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # a peer's client may hold non-daemon threads (pools, listeners)


if __name__ == "__main__":
    main()
