"""``flow()`` reads its decision counts from ``lockgate_flow_counts``, kept as the ledger is written.

Whatever wrote the ledger rows (bursts of starts over many group commits, the drainer, an
unpause, another connection), ``flow()`` gives what aggregating the whole ledger gives, and
``flow(since=)``, which does aggregate the rows of its period, agrees over the same rows.
SQLite folds the ledger into the counts at a commit once ``FOLD_AT`` rows or more are left
out (a read adds those up itself); the tests fold sooner to cross many folds.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.clock import to_datetime
from lockgate.store import sqlite as sqlite_store
from lockgate.store.sql_files import migrations
from lockgate.testing import TestEnv

from .apps.gate_probes import sql
from .pg import pg_database_url

T0 = 1_800_000_000.0
COUNTED = ("admitted", "collapsed", "batched", "dropped", "skipped", "expired", "existing")
Totals = dict[tuple[str, str], dict[str, int]]


class Job(BaseModel):
    key: str = "k"
    n: int = 0


def by_key(p: Job) -> str:
    return p.key


def counted_app() -> lg.App:
    app = lg.App()

    async def quick(ctx: lg.Context, p: Job) -> int:
        return p.n

    app.workflow(name="plain")(quick)
    app.workflow(name="conc", concurrency=lg.Concurrency(limit=2, key=by_key))(quick)
    app.workflow(name="deb", debounce=lg.Debounce(period="1m", key=by_key))(quick)
    app.workflow(name="rate", rate_limit=lg.RateLimit(limit=3, period="1h", key=by_key))(quick)
    return app


async def ledger_totals(url: str, since: float | None = None) -> Totals:
    """What aggregating the ledger gives, as ``flow()`` reports it: the counted outcomes per workflow and key."""
    rows = await sql(
        url,
        "SELECT workflow, COALESCE(key, '') AS key, outcome, COUNT(*) AS n FROM lockgate_ledger WHERE at >= ? "
        "GROUP BY workflow, COALESCE(key, ''), outcome",
        -1.0 if since is None else since,
    )
    totals: Totals = {}
    for r in rows:
        if r["outcome"] in COUNTED:
            totals.setdefault((r["workflow"], r["key"]), {})[r["outcome"]] = int(r["n"])
    return totals


def flow_totals(rows: list[lg.FlowRow]) -> Totals:
    totals: Totals = {}
    for f in rows:
        counts = {name: getattr(f, name) for name in COUNTED if getattr(f, name)}
        if counts:
            totals[(f.workflow, f.key)] = counts
    return totals


async def quiet(env: TestEnv) -> None:
    """Let debounce periods pass until nothing is parked or running: no decision is still to come."""
    deadline = asyncio.get_running_loop().time() + 30
    while busy := [f for f in await env.engine.flow() if f.queued or f.in_flight]:
        assert asyncio.get_running_loop().time() < deadline, busy
        await env.advance("2m")
        await env.engine.drainer.tick()
        await env.settle()


async def burst(env: TestEnv, round_: int) -> None:
    """One round of concurrent starts: each round is at least one group commit of its own."""
    e = env.engine
    starts = [e.start("plain", {"n": round_ * 10 + i}) for i in range(8)]
    starts += [e.start("plain", {"n": i}, idempotency_key=f"same-{i}") for i in range(2)]  # existing after round 0
    starts += [e.start("conc", {"key": f"t{i % 3}", "n": i}) for i in range(4)]
    starts += [e.start("deb", {"key": f"row-{i % 2}", "n": i}) for i in range(3)]
    starts += [e.start("rate", {"key": f"r{i % 2}", "n": i}) for i in range(3)]
    await asyncio.gather(*starts)


@pytest.mark.parametrize("fold_at", [1, 7, sqlite_store.FOLD_AT])
async def test_flow_counts_what_the_ledger_holds_across_many_group_commits(
    env_factory: Any, fold_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "FOLD_AT", fold_at)
    async with env_factory(counted_app(), start=T0) as env:
        e = env.engine
        for round_ in range(12):
            await burst(env, round_)
        await env.settle()
        await e.pause("plain")
        await asyncio.gather(*(e.start("plain", {"n": 1000 + i}) for i in range(30)))
        assert await e.unpause("plain") == 30  # `released` rows, then `admitted` ones by the drainer
        await quiet(env)
        middle = env.clock.now()
        for round_ in range(12, 20):
            await burst(env, round_)
        await quiet(env)

        everything = await ledger_totals(env.store_url)
        assert {o for counts in everything.values() for o in counts} >= {"admitted", "collapsed", "dropped", "existing"}
        assert flow_totals(await e.flow()) == everything
        assert flow_totals(await e.flow(since=to_datetime(T0))) == everything
        assert flow_totals(await e.flow("conc")) == {k: v for k, v in everything.items() if k[0] == "conc"}
        assert flow_totals(await e.flow(since=to_datetime(middle))) == await ledger_totals(env.store_url, middle)
        if env.store_url.startswith("sqlite"):  # what a read adds up itself stays under FOLD_AT rows
            (mark,) = await sql(
                env.store_url, "SELECT (SELECT MAX(id) FROM lockgate_ledger) - upto AS n FROM lockgate_flow_counted"
            )
            assert 0 <= mark["n"] < fold_at


async def test_a_ledger_row_another_connection_writes_is_counted(
    env_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "FOLD_AT", 1)
    async with env_factory(counted_app(), start=T0) as env:
        e = env.engine
        await e.start("plain", {"n": 1})
        await sql(
            env.store_url,
            "INSERT INTO lockgate_ledger (ticket, kind, workflow, key, outcome, at) VALUES (?, ?, ?, ?, ?, ?)",
            "tkt_elsewhere",
            "arrival",
            "plain",
            None,
            "dropped",
            T0,
        )
        (row,) = await e.flow("plain")
        assert (row.admitted, row.dropped) == (1, 1)
        await e.start("plain", {"n": 2})  # a later commit of this store folds the row in too
        (row,) = await e.flow("plain")
        assert (row.admitted, row.dropped) == (2, 1)
        assert flow_totals(await e.flow()) == await ledger_totals(env.store_url)
        kept = await sql(
            env.store_url,
            "SELECT SUM(n) AS n FROM lockgate_flow_counts WHERE workflow = ? AND outcome = ?",
            "plain",
            "admitted",
        )
        assert kept[0]["n"] == 2  # held in the counts, not read from the ledger


# -- PostgreSQL: writers count apart ------------------------------------------------------------


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request)


PART_LOCK = 1818715747  # the advisory lock class of lockgate_count_ledger's parts


async def test_a_writer_counts_apart_while_another_holds_the_first_part(pg_url: str) -> None:
    """A transaction that holds part 0 (another process's group commit) makes no writer wait."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(pg_url) as other:
        await other.execute("SELECT pg_advisory_xact_lock(%s, 0)", (PART_LOCK,))  # held until it ends
        async with TestEnv(counted_app(), store=pg_url, start=T0) as env:
            handles = await asyncio.wait_for(
                asyncio.gather(*(env.engine.start("plain", {"n": i}) for i in range(5))), timeout=30
            )
            assert [h.status for h in handles] == ["started"] * 5
            parts = await sql(pg_url, "SELECT part, n FROM lockgate_flow_counts WHERE workflow = 'plain'")
            assert [(r["part"], r["n"]) for r in parts] == [(1, 5)]
            await other.rollback()
            await env.engine.start("plain", {"n": 9})
            parts = await sql(pg_url, "SELECT part, n FROM lockgate_flow_counts WHERE workflow = 'plain' ORDER BY part")
            assert [(r["part"], r["n"]) for r in parts] == [(0, 1), (1, 5)]
            (row,) = await env.engine.flow("plain")
            assert row.admitted == 6


# -- the migration counts the ledger it finds ---------------------------------------------------

OLD_LEDGER = [
    ("tkt_1", "arrival", "a", "k1", "admitted", 1.0),
    ("tkt_2", "arrival", "a", "k1", "collapsed", 2.0),
    ("tkt_3", "arrival", "a", None, "admitted", 3.0),
    ("tkt_4", "arrival", "a", "k1", "admitted", 4.0),
    ("tkt_5", "drain", "b", "", "expired", 5.0),
]
OLD_COUNTS = [
    ("a", "", "admitted", 1),
    ("a", "k1", "admitted", 2),
    ("a", "k1", "collapsed", 1),
    ("b", "", "expired", 1),
]
INSERT_OLD = "INSERT INTO lockgate_ledger (ticket, kind, workflow, key, outcome, at) VALUES (?, ?, ?, ?, ?, ?)"


def _version(steps: list[tuple[int, str, str]], name: str) -> int:
    return next(version for version, named, _ in steps if named == name)


def test_the_sqlite_migration_counts_the_ledger_it_finds(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db")
    steps = migrations("sqlite")
    counting = _version(steps, "flow_counts")
    for version, _, script in steps:
        if version < counting:
            conn.executescript(script)
    conn.executemany(INSERT_OLD, OLD_LEDGER)
    for version, _, script in steps:
        if version == counting:
            conn.executescript(script)
    counts = conn.execute("SELECT workflow, key, outcome, n FROM lockgate_flow_counts ORDER BY 1, 2, 3").fetchall()
    assert counts == OLD_COUNTS
    assert conn.execute("SELECT upto FROM lockgate_flow_counted").fetchall() == [(5,)]


@pytest.fixture
def empty_pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request, migrated=False)


async def test_the_postgres_migration_counts_the_ledger_it_finds(empty_pg_url: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(empty_pg_url, autocommit=True) as conn:
        steps = migrations("postgres")
        counting = _version(steps, "flow_counts")
        for version, _, script in steps:
            if version < counting:
                await conn.execute(script)  # type: ignore[arg-type]
        async with conn.cursor() as cursor:
            await cursor.executemany(INSERT_OLD.replace("?", "%s"), OLD_LEDGER)
        for version, _, script in steps:
            if version == counting:
                await conn.execute(script)  # type: ignore[arg-type]
        cursor = await conn.execute("SELECT workflow, key, outcome, n FROM lockgate_flow_counts ORDER BY 1, 2, 3")
        assert await cursor.fetchall() == OLD_COUNTS
        await conn.execute(INSERT_OLD.replace("?", "%s"), ("tkt_6", "arrival", "b", None, "expired", 6.0))
        cursor = await conn.execute("SELECT SUM(n) FROM lockgate_flow_counts WHERE workflow = 'b'")
        assert await cursor.fetchone() == (2,)
