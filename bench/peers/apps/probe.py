"""What every peer's job does, the same for all: a no-op, a short sleep or a long hold,
with its start and end recorded in Redis (a database number of its own, never the broker's).

The records are what the driver measures with: ``done`` (jobs finished), ``inflight`` and
``max_inflight`` (jobs between start and end, as Redis counts them), ``starts`` (the start time
of each job, for the rolling-second check of a rate limit), ``spans`` (each job's start and end
as its body read the clock: the most bodies in flight at any instant is computed from these)
and ``done:<job>`` (pushed at the end, so a caller can wait for one job with ``BLPOP`` instead
of polling). A job on an event loop (``awork``) talks to Redis through the asyncio client, so
its records never hold up the other jobs of its worker. The durability case's jobs also
count their completions in a side table on PostgreSQL (``peers_side``): a job run twice
counts 2.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import psycopg
import redis
import redis.asyncio

__all__ = ["SLEEP_S", "abegin", "aend", "awork", "begin", "end", "redis_client", "work"]

SLEEP_S = float(os.environ.get("PEERS_SLEEP_S", "0.02"))
"""How long a job of kind ``sleep`` (case j3) takes."""
HOLD_S = float(os.environ.get("PEERS_HOLD_S", "5"))
"""How long a job of kind ``hold`` (case j5) takes before its side effect."""

_BEGIN = """
local n = redis.call('INCR', KEYS[1])
local m = tonumber(redis.call('GET', KEYS[2]) or '0')
if n > m then redis.call('SET', KEYS[2], n) end
redis.call('RPUSH', KEYS[3], ARGV[1])
return n
"""

_local = threading.local()


def redis_client() -> redis.Redis:
    """This thread's client on the probe's database (``PEERS_PROBE``)."""
    client: redis.Redis | None = getattr(_local, "redis", None)
    if client is None:
        client = redis.Redis.from_url(os.environ["PEERS_PROBE"])
        _local.redis = client
        _local.begin = client.register_script(_BEGIN)
    return client


def begin() -> float:
    """Record that a job started now; the time it started."""
    at = time.time()
    redis_client()
    _local.begin(keys=["inflight", "max_inflight", "starts"], args=[repr(at)])
    return at


def end(job: int, started: float) -> None:
    """Record that job ``job``, started at ``started``, finished now."""
    span = f"{started!r} {time.time()!r}"
    pipe = redis_client().pipeline(transaction=False)
    pipe.decr("inflight")
    pipe.incr("done")
    pipe.rpush("spans", span)
    pipe.rpush(f"done:{job}", 1)
    pipe.execute()


_async: dict[int, tuple[redis.asyncio.Redis, Any]] = {}  # per event loop: its client and the begin script


def _async_client() -> tuple[redis.asyncio.Redis, Any]:
    key = id(asyncio.get_running_loop())
    found = _async.get(key)
    if found is None:
        # A job waits for a free connection (the plain pool refuses past its size): hundreds of runs of
        # one event loop may record at once.
        url = os.environ["PEERS_PROBE"]
        pool = redis.asyncio.BlockingConnectionPool.from_url(url, max_connections=32, timeout=None)
        client = redis.asyncio.Redis(connection_pool=pool)
        found = _async[key] = (client, client.register_script(_BEGIN))
    return found


async def abegin() -> float:
    """``begin`` without blocking the event loop the job runs on."""
    at = time.time()
    _, script = _async_client()
    await script(keys=["inflight", "max_inflight", "starts"], args=[repr(at)])
    return at


async def aend(job: int, started: float) -> None:
    """``end`` without blocking the event loop the job runs on."""
    span = f"{started!r} {time.time()!r}"
    client, _ = _async_client()
    pipe = client.pipeline(transaction=False)
    pipe.decr("inflight")
    pipe.incr("done")
    pipe.rpush("spans", span)
    pipe.rpush(f"done:{job}", 1)
    await pipe.execute()


_COUNT = "INSERT INTO peers_side (job, runs) VALUES (%s, 1) ON CONFLICT (job) DO UPDATE SET runs = peers_side.runs + 1"
_side_lock = threading.Lock()
_side: list[psycopg.Connection[tuple[object, ...]]] = []


def side_effect(job: int) -> None:
    """Count one completion of ``job`` in the side table: one autocommit connection per process,
    shared under a lock (a hundred threads each with its own would exhaust the server's connections)."""
    with _side_lock:
        if not _side or _side[0].closed:
            _side[:] = [psycopg.connect(os.environ["PEERS_SIDE"], autocommit=True)]
        _side[0].execute(_COUNT, (job,))


def work(kind: str, job: int) -> None:
    """A job for a worker that runs jobs in threads or processes."""
    started = begin()
    if kind == "sleep":
        time.sleep(SLEEP_S)
    elif kind == "hold":
        time.sleep(HOLD_S)
        side_effect(job)
    end(job, started)


async def awork(kind: str, job: int) -> None:
    """The same job for a worker that runs jobs on an event loop."""
    started = await abegin()
    if kind == "sleep":
        await asyncio.sleep(SLEEP_S)
    elif kind == "hold":
        await asyncio.sleep(HOLD_S)
        await asyncio.to_thread(side_effect, job)
    await aend(job, started)
