"""Waiting for another connection's SQLite write lock: on a timer, never on the event loop's thread.

While another process (here, another connection) holds the write lock, the engine's writes
wait for it, and everything else its loop runs goes on: timers, reads, the bodies executing.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

import lockgate as lg

from .apps.waits import eventually

DEADLINE = 10.0

ticks: list[float] = []
app_busy = lg.App("busy")


class Count(BaseModel):
    n: int


class One(BaseModel):
    i: int


@app_busy.workflow(name="busy.tick")
async def tick(ctx: lg.Context, p: Count) -> None:
    for _ in range(p.n):
        ticks.append(time.monotonic())
        await asyncio.sleep(0.01)


@app_busy.workflow(name="busy.noop")
async def noop(ctx: lg.Context, p: One) -> int:
    return p.i


async def test_a_held_write_lock_does_not_stall_the_loop_nor_the_runs_executing(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    ticks.clear()
    async with lg.Engine(app_busy, f"sqlite:///{path}", poll_interval=0.05) as engine:
        assert await engine.run("busy.noop", {"i": 0}) == 0
        other = sqlite3.connect(path, isolation_level=None)
        ticker = await engine.start("busy.tick", {"n": 60})  # its body ticks every 10 ms, writing nothing
        await eventually(lambda: len(ticks) >= 3, what="the ticking body")
        other.execute("BEGIN IMMEDIATE")  # as another process would: every write of the engine waits
        try:
            held_at, before = time.monotonic(), len(ticks)
            start = asyncio.ensure_future(engine.start("busy.noop", {"i": 1}))
            loop_ticks = 0
            while time.monotonic() - held_at < 0.4:
                await asyncio.sleep(0.01)
                loop_ticks += 1
            assert not start.done()  # its commit waits for the lock
            assert loop_ticks >= 10  # the loop ran on: no busy handler slept on its thread
            assert len(ticks) - before >= 10  # and so did the run executing here
            assert (await engine.get_run(ticker.run_id or "")).status == "running"  # reads go on too
        finally:
            other.execute("ROLLBACK")
            other.close()
        handle = await asyncio.wait_for(start, DEADLINE)
        assert await engine.result(handle.run_id or "", timeout=DEADLINE) == 1
        await engine.result(ticker.run_id or "", timeout=DEADLINE)


async def test_a_write_lock_held_past_busy_timeout_refuses_the_write_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    async with lg.Engine(app_busy, f"sqlite:///{path}?busy_timeout_ms=200", poll_interval=0.05) as engine:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            held_at = time.monotonic()
            with pytest.raises(lg.StoreError, match="locked"):
                await engine.start("busy.noop", {"i": 7})
            assert 0.15 <= time.monotonic() - held_at < 5
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert await engine.list_runs() == []
        assert await engine.run("busy.noop", {"i": 8}) == 8  # the lock gone, writes go through again
