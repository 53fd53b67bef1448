"""Sliding windows at the gate: throttle makes the excess late, rate limit makes it gone.

Everything runs on the fake clock: the window slides only when the test moves time.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.clock import to_datetime
from lockgate.store import gate, open_store
from lockgate.store.base import Tx
from lockgate.store.sql_files import load_queries, migrations
from lockgate.testing import TestEnv

from .apps.gate import advance
from .apps.gate_probes import ledger_rows, pending_rows, sql

T0 = 1_800_000_000.0  # a round start instant: window edges are exact


class Job(BaseModel):
    key: str = "k"
    n: int = 0


def windowed_app(*names: str, **options: Any) -> lg.App:
    """Workflows ``names`` declaring ``options`` (a throttle or rate limit); each returns its ``n``."""
    app = lg.App()
    for name in names:

        async def body(ctx: lg.Context, p: Job) -> int:
            return p.n

        app.workflow(name=name, **options)(body)
    return app


async def succeeded(env: TestEnv, workflow: str | None = None) -> list[int]:
    """The payload numbers of the runs that succeeded so far, in order of creation."""
    runs = await env.engine.list_runs(workflow=workflow, status="succeeded", limit=500)
    return [r.payload["n"] for r in sorted(runs, key=lambda r: (r.created_at, r.id))]


# -- throttle: late ----------------------------------------------------------------------------


async def test_throttle_queues_the_excess_and_spaces_it_by_the_sliding_window(env_factory: Any) -> None:
    app = windowed_app("th", throttle=lg.Throttle(limit=2, period="1m"))
    async with env_factory(app, start=T0) as env:
        handles = [await env.engine.start("th", {"n": i}) for i in range(5)]
        assert [h.status for h in handles] == ["started", "started", "queued", "queued", "queued"]
        for h in handles[2:]:
            assert h.run_id is None and h.deferral is not None
            assert (h.deferral.mode, h.deferral.due_at) == ("throttle", to_datetime(T0 + 60))
        await env.settle()
        assert await succeeded(env) == [0, 1]

        await advance(env, "59s")
        assert await succeeded(env) == [0, 1]  # the window has not slid yet

        await advance(env, "1s")
        assert await succeeded(env) == [0, 1, 2, 3]
        (left,) = await pending_rows(env.store_url)
        assert (left["ticket"], left["mode"], left["due_at"]) == (handles[4].ticket, "throttle", T0 + 120)

        await advance(env, "60s")
        assert await succeeded(env) == [0, 1, 2, 3, 4]
        assert await pending_rows(env.store_url) == []
        created = [(await env.engine.get_run(r.id)).created_at for r in await env.engine.list_runs(limit=10)]
        assert Counter(int(c.timestamp() - T0) for c in created) == {0: 2, 60: 2, 120: 1}

        rows = await ledger_rows(env.engine, handles[4].ticket)
        assert [(r["kind"], r["outcome"], r["control"]) for r in rows] == [
            ("arrival", "queued", "throttle"),
            ("drain", "admitted", "throttle"),
        ]
        assert rows[1]["waited"] == pytest.approx(120.0)
        assert rows[1]["run_id"] == (await env.engine.trace(handles[4].ticket)).run_id


async def test_throttle_keys_partition_the_window(env_factory: Any) -> None:
    app = windowed_app("th", throttle=lg.Throttle(limit=1, period="1m", key=lambda p: p.key))
    async with env_factory(app, start=T0) as env:
        a = [await env.engine.start("th", {"key": "a", "n": i}) for i in range(2)]
        b = [await env.engine.start("th", {"key": "b", "n": 10 + i}) for i in range(2)]
        assert [h.status for h in a + b] == ["started", "queued", "started", "queued"]
        assert a[1].deferral is not None and a[1].deferral.key == "a"
        assert b[1].deferral is not None and b[1].deferral.key == "b"
        await advance(env, "1m")
        assert sorted(await succeeded(env)) == [0, 1, 10, 11]


async def test_a_fresh_arrival_queues_behind_starts_already_waiting_for_the_window(env_factory: Any) -> None:
    app = windowed_app("th", throttle=lg.Throttle(limit=1, period="1m"))
    async with env_factory(app, start=T0) as env:
        first, second = [await env.engine.start("th", {"n": i}) for i in range(2)]
        env.clock.advance("1m")  # the window has room again, but `second` waits for it
        late = await env.engine.start("th", {"n": 2})
        assert (first.status, second.status, late.status) == ("started", "queued", "queued")
        await advance(env)
        assert await succeeded(env) == [0, 1]
        await advance(env, "1m")
        assert await succeeded(env) == [0, 1, 2]


async def test_a_list_of_throttle_windows_enforces_each_of_them(env_factory: Any) -> None:
    app = windowed_app("th", throttle=[lg.Throttle(limit=2, period="1s"), lg.Throttle(limit=5, period="1m")])
    async with env_factory(app, start=T0) as env:
        handles = [await env.engine.start("th", {"n": i}) for i in range(7)]
        assert Counter(h.status for h in handles) == {"started": 2, "queued": 5}
        await env.settle()
        seen = [len(await succeeded(env))]
        for _ in range(3):
            await advance(env, "1s")
            seen.append(len(await succeeded(env)))
        # 2 per second until the minute holds 5, then nothing until the minute slides
        assert seen == [2, 4, 5, 5]
        await advance(env, timedelta(seconds=56))  # T0 + 59s
        assert len(await succeeded(env)) == 5
        await advance(env, "1s")  # T0 + 60s: the two admitted at T0 leave the minute
        assert await succeeded(env) == list(range(7))


async def test_a_throttle_pool_shares_one_window_across_workflows(env_factory: Any) -> None:
    shared = lg.Throttle(limit=3, period="1m", pool="search")
    async with env_factory(windowed_app("th.a", "th.b", throttle=shared), start=T0) as env:
        handles = []
        for i in range(3):
            handles.append(await env.engine.start("th.a", {"n": i}))
            handles.append(await env.engine.start("th.b", {"n": 10 + i}))
        assert [h.status for h in handles] == ["started"] * 3 + ["queued"] * 3
        await advance(env, "1m")
        assert sorted(await succeeded(env)) == [0, 1, 2, 10, 11, 12]


# -- rate limit: gone ----------------------------------------------------------------------------


async def test_rate_limit_drops_the_excess_with_retry_after_and_a_ledger_row(env_factory: Any) -> None:
    app = windowed_app("rl", rate_limit=lg.RateLimit(limit=2, period="1m", key=lambda p: p.key))
    async with env_factory(app, start=T0) as env:
        first = await env.engine.start("rl", {"key": "a", "n": 1})
        await env.advance("10s")
        second = await env.engine.start("rl", {"key": "a", "n": 2})
        await env.advance("5s")
        dropped = await env.engine.start("rl", {"key": "a", "n": 3})
        assert (first.status, second.status, dropped.status) == ("started", "started", "dropped")
        assert dropped.run_id is None and dropped.deferral is None
        # the oldest hit (T0) leaves the window at T0 + 60s; it is T0 + 15s now
        assert dropped.retry_after == timedelta(seconds=45)

        (row,) = await ledger_rows(env.engine, dropped.ticket)
        assert (row["kind"], row["workflow"], row["outcome"], row["control"], row["key"]) == (
            "arrival",
            "rl",
            "dropped",
            "rate_limit",
            "a",
        )
        assert "2 per 60s" in row["reason"] and "retry after 45" in row["reason"]
        assert row["run_id"] is None and row["pending_id"] is None
        assert await pending_rows(env.store_url) == []  # gone: nothing waits for the window

        other = await env.engine.start("rl", {"key": "b", "n": 4})
        assert other.status == "started"  # the key partitions the window

        with pytest.raises(lg.RateLimited) as refused:
            await env.engine.start("rl", {"key": "a", "n": 5}, wait=True)
        assert refused.value.retry_after == timedelta(seconds=45)
        assert refused.value.workflow == "rl"

        await env.advance("45s")
        await env.settle()
        again = await env.engine.start("rl", {"key": "a", "n": 6})
        assert again.status == "started"
        await env.settle()
        assert sorted(await succeeded(env)) == [1, 2, 4, 6]  # the dropped starts never ran
        flow = {(f.workflow, f.key): f for f in await env.engine.flow()}
        assert (flow[("rl", "a")].dropped, flow[("rl", "a")].admitted) == (2, 3)
        assert (flow[("rl", "b")].dropped, flow[("rl", "b")].admitted) == (0, 1)


async def test_a_blocking_start_under_a_rate_limit_returns_the_result_when_admitted(env_factory: Any) -> None:
    app = windowed_app("rl", rate_limit=lg.RateLimit(limit=1, period="1m"))
    async with env_factory(app, start=T0) as env:
        handle = await env.engine.start("rl", {"n": 7}, wait=True, timeout=10)
        assert handle.status == "started"
        assert await handle.result(timeout=1) == 7


async def test_a_list_of_rate_limits_enforces_each_of_them(env_factory: Any) -> None:
    app = windowed_app("rl", rate_limit=[lg.RateLimit(limit=2, period="1s"), lg.RateLimit(limit=5, period="1m")])
    async with env_factory(app, start=T0) as env:
        outcomes: list[list[str]] = []
        for second in range(4):
            if second:
                await env.advance("1s")
            outcomes.append([(await env.engine.start("rl", {"n": second * 10 + i})).status for i in range(3)])
        assert outcomes == [
            ["started", "started", "dropped"],  # 2 per second
            ["started", "started", "dropped"],
            ["started", "dropped", "dropped"],  # the minute is full at 5
            ["dropped", "dropped", "dropped"],
        ]
        late = await env.engine.start("rl", {"n": 99})
        assert late.retry_after == timedelta(seconds=57)  # the T0 hits leave the minute at T0 + 60s
        (row,) = await ledger_rows(env.engine, late.ticket)
        assert "5 per 60s" in row["reason"]
        # a start the per-second window would drop is not counted by the minute either
        await env.advance("57s")
        assert [(await env.engine.start("rl", {"n": 100 + i})).status for i in range(3)] == [
            "started",
            "started",
            "dropped",
        ]


async def test_a_rate_limit_pool_shares_one_window_across_workflows(env_factory: Any) -> None:
    shared = lg.RateLimit(limit=3, period="1m", pool="provider")
    async with env_factory(windowed_app("rl.a", "rl.b", rate_limit=shared), start=T0) as env:
        statuses = []
        for i in range(2):
            statuses.append((await env.engine.start("rl.a", {"n": i})).status)
            statuses.append((await env.engine.start("rl.b", {"n": 10 + i})).status)
        assert statuses == ["started", "started", "started", "dropped"]
        await env.settle()
        assert sorted(await succeeded(env)) == [0, 1, 10]


# -- the cost of a window check ------------------------------------------------------------------


def test_a_window_check_is_one_lookup_by_rank_whatever_the_limit(tmp_path: Path) -> None:
    """The limit-th most recent hit is found through the rank index, not by walking ``limit`` entries."""
    for dialect in ("sqlite", "postgres"):
        nth = load_queries(dialect)["window_nth"]
        assert " OFFSET " not in nth.upper() and "MAX(n)" in nth, (dialect, nth)
    asyncio.run(_migrated(tmp_path / "plan.db"))
    conn = sqlite3.connect(tmp_path / "plan.db")
    plan = conn.execute(
        "EXPLAIN QUERY PLAN " + load_queries("sqlite")["window_nth"],
        {"scope": "s", "key": "k", "since": 0.0, "back": 999},
    ).fetchall()
    details = " | ".join(str(row[-1]) for row in plan)
    assert "lockgate_window_hits_rank" in details and "SCAN" not in details, details


def test_hits_recorded_before_ranks_existed_are_ranked_by_the_migration(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db")
    steps = migrations("sqlite")
    for version, _, script in steps:
        if version < 4:
            conn.executescript(script)
    rows = [("a", "k", 5.0), ("a", "k", 1.0), ("b", "k", 2.0), ("a", "k", 3.0), ("a", "j", 4.0)]
    conn.executemany("INSERT INTO lockgate_window_hits (scope, key, at) VALUES (?, ?, ?)", rows)
    for version, _, script in steps:
        if version == 4:
            conn.executescript(script)
    ranked = conn.execute("SELECT scope, key, at, n FROM lockgate_window_hits ORDER BY scope, key, n").fetchall()
    assert ranked == [
        ("a", "j", 4.0, 1),
        ("a", "k", 1.0, 1),
        ("a", "k", 3.0, 2),
        ("a", "k", 5.0, 3),
        ("b", "k", 2.0, 1),
    ]


async def test_a_window_check_returns_at_most_limit_hits_however_many_are_stored(env_factory: Any) -> None:
    app = windowed_app("rl", rate_limit=lg.RateLimit(limit=3, period="1h"))
    async with env_factory(app, start=T0) as env:
        for i in range(50):
            await sql(
                env.store_url,
                "INSERT INTO lockgate_window_hits (scope, key, at, n) VALUES (?, ?, ?, ?)",
                "wf:rl:rate_limit[0]",
                "",
                T0 - 100 + i,
                i + 1,
            )

        async def probe(tx: Tx) -> float | None:
            return await gate.window_opens(tx, "wf:rl:rate_limit[0]", "", T0 - 3600, 3)

        # full: the third-newest hit is the one whose leaving makes room
        assert await env.engine.store.read(probe) == T0 - 53
        assert (await env.engine.start("rl", {"n": 1})).status == "dropped"


async def test_a_throttle_counts_admissions_when_concurrency_holds_starts_back(env_factory: Any) -> None:
    """A start that passed the throttle but waited for a slot is judged by the window again when admitted."""
    app = lg.App()

    class Go(BaseModel):
        ok: bool = True

    @app.workflow(name="th", throttle=lg.Throttle(limit=2, period="60s"), concurrency=lg.Concurrency(limit=1))
    async def body(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.n

    async with env_factory(app, start=T0) as env:
        handles = [await env.engine.start("th", {"n": i}) for i in range(6)]
        assert [h.status for h in handles] == ["started"] + ["queued"] * 5
        for _ in range(40):  # every run ends 10s after it started
            await advance(env, "10s")
            for run in await env.engine.list_runs(workflow="th", status="running"):
                await env.engine.signal(run.id, "go", {})
            await env.settle()
            if len(await succeeded(env)) == 6:
                break
        assert sorted(await succeeded(env)) == list(range(6))
        starts = sorted(r.created_at.timestamp() for r in await env.engine.list_runs(workflow="th", limit=10))
        for now in starts:  # the gate's window: (now - period, now]
            in_window = [t for t in starts if now - 60 < t <= now]
            assert len(in_window) <= 2, [t - T0 for t in starts]


async def _migrated(path: Path) -> None:
    """A database the store itself created and migrated (as any deployment's is)."""
    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.close()
