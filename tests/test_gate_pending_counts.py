"""``flow()`` reads parked starts from ``lockgate_pending_counts``, kept by triggers as rows park and go.

Whatever parks, moves or removes a row (an arrival, a fold, an unpause, a cancel, the drainer,
another connection's SQL), ``flow()`` gives what counting ``lockgate_pending`` itself gives:
queued per workflow and key, per mode and per source, and the oldest waiter's age.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.clock import to_datetime
from lockgate.store import sqlite as sqlite_store
from lockgate.store.sql_files import migrations

from .apps.gate_probes import sql
from .pg import pg_database_url

Parked = dict[tuple[str, str], dict[str, Any]]


class Job(BaseModel):
    key: str = "k"
    n: int = 0


def by_key(p: Job) -> str:
    return p.key


def parking_app() -> lg.App:
    app = lg.App()

    async def quick(ctx: lg.Context, p: Job) -> int:
        return p.n

    app.workflow(name="conc", concurrency=lg.Concurrency(limit=1, key=by_key))(quick)
    app.workflow(name="deb", debounce=lg.Debounce(period="1h", key=by_key))(quick)
    app.workflow(name="held")(quick)
    app.workflow(name="later")(quick)
    return app


async def counted(url: str) -> Parked:
    """What counting the parked rows themselves gives, as ``flow()`` reports it."""
    rows = await sql(
        url,
        "SELECT workflow, mode, COALESCE(hold_key, '') AS key, COALESCE(source, '') AS source, COUNT(*) AS n, "
        "MIN(first_at) AS oldest FROM lockgate_pending GROUP BY 1, 2, 3, 4",
    )
    parked: Parked = {}
    for r in rows:
        entry = parked.setdefault((r["workflow"], r["key"]), {"queued": 0, "modes": {}, "sources": {}, "oldest": None})
        entry["queued"] += int(r["n"])
        entry["modes"][r["mode"]] = entry["modes"].get(r["mode"], 0) + int(r["n"])
        if r["source"]:
            entry["sources"][r["source"]] = entry["sources"].get(r["source"], 0) + int(r["n"])
        oldest = float(r["oldest"])
        entry["oldest"] = oldest if entry["oldest"] is None else min(entry["oldest"], oldest)
    return parked


async def agrees(client: lg.Client, url: str) -> Parked:
    """``flow()`` says what the parked rows say (the oldest within the seconds between the two reads)."""
    expected = await counted(url)
    rows = await client.flow()
    now = time.time()
    seen = {(r.workflow, r.key): r for r in rows if r.queued}
    assert set(seen) == set(expected), (seen, expected)
    for k, want in expected.items():
        row = seen[k]
        assert (row.queued, row.modes, row.sources) == (want["queued"], want["modes"], want["sources"]), (k, row)
        assert row.oldest_waiting is not None and abs(row.oldest_waiting - (now - want["oldest"])) < 5.0, (k, row)
    return expected


async def test_flow_counts_the_rows_parked_moved_and_removed(store_url: str) -> None:
    async with lg.Client(parking_app(), store_url) as client:
        await client.pause("held")
        starts = [client.start("conc", {"key": f"t{i % 3}", "n": i}) for i in range(12)]
        starts += [client.start("deb", {"key": f"row-{i % 2}", "n": i}) for i in range(5)]  # folds
        starts += [client.start("held", {"n": i}) for i in range(4)]
        starts += [client.start("later", {"n": i}, at=to_datetime(time.time() + 3600)) for i in range(2)]
        handles = await asyncio.gather(*starts)
        parked = await agrees(client, store_url)
        assert parked[("conc", "t0")]["queued"] == 3 and parked[("held", "")]["modes"] == {"paused": 4}
        assert parked[("deb", "row-0")]["queued"] == 1

        assert await client.unpause("held") == 4  # paused -> released: the rows change group
        await agrees(client, store_url)

        queued = next(h for h in handles if h.status == "queued" and h.workflow == "conc")
        assert await client.cancel_start(queued.ticket, "not needed") == 1
        parked = await agrees(client, store_url)

        await sql(store_url, "DELETE FROM lockgate_pending WHERE workflow = 'later'")  # an operator's shell
        await sql(
            store_url, "UPDATE lockgate_pending SET hold_key = 'moved' WHERE workflow = 'conc' AND hold_key = 't1'"
        )
        parked = await agrees(client, store_url)
        assert ("later", "") not in parked and parked[("conc", "moved")]["queued"] == 3

    async with lg.Engine(parking_app(), store_url) as engine:  # drains all but the open debounce groups
        deadline = time.monotonic() + 60
        while any(r.queued for r in await engine.flow() if r.workflow != "deb"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    async with lg.Client(parking_app(), store_url) as client:
        assert set(await agrees(client, store_url)) == {("deb", "row-0"), ("deb", "row-1")}
    left = await sql(
        store_url, "SELECT workflow, SUM(n) AS n FROM lockgate_pending_counts GROUP BY workflow HAVING SUM(n) <> 0"
    )
    assert {r["workflow"]: int(r["n"]) for r in left} == {"deb": 2}


# -- PostgreSQL: writers count apart ------------------------------------------------------------


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request)


PART_LOCK = 1818715747  # the advisory lock class of the count triggers' parts


async def test_a_writer_counts_parked_rows_apart_while_another_holds_the_first_part(pg_url: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(pg_url) as other:
        await other.execute("SELECT pg_advisory_xact_lock(%s, 0)", (PART_LOCK,))  # held until it ends
        async with lg.Client(parking_app(), pg_url) as client:
            await asyncio.wait_for(
                asyncio.gather(*(client.start("conc", {"key": "solo", "n": i}) for i in range(4))), timeout=30
            )
            parts = await sql(pg_url, "SELECT part, n FROM lockgate_pending_counts WHERE workflow = 'conc'")
            assert [(r["part"], r["n"]) for r in parts] == [(1, 3)]  # one admitted, three parked
            await other.rollback()
            await sql(pg_url, "DELETE FROM lockgate_pending WHERE id IN (SELECT id FROM lockgate_pending LIMIT 1)")
            parts = await sql(
                pg_url, "SELECT part, n FROM lockgate_pending_counts WHERE workflow = 'conc' ORDER BY part"
            )
            assert [(r["part"], r["n"]) for r in parts] == [(0, -1), (1, 3)]
            (row,) = [r for r in await client.flow("conc") if r.queued]
            assert row.queued == 2


# -- the migration counts the rows it finds -----------------------------------------------------

OLD_PENDING = [
    ("pnd_1", "a", "concurrency", "k1", None, 5.0),
    ("pnd_2", "a", "concurrency", "k1", None, 3.0),
    ("pnd_3", "a", "paused", None, "event:x", 4.0),
    ("pnd_4", "b", "delayed", None, None, 1.0),
]
OLD_COUNTS = [
    ("a", "concurrency", "k1", "", 2),
    ("a", "paused", "", "event:x", 1),
    ("b", "delayed", "", "", 1),
]
INSERT_OLD = (
    "INSERT INTO lockgate_pending (id, workflow, ticket, mode, stage, hold_key, source, payload, seq, first_at, "
    "last_at) VALUES (?, ?, 'tkt', ?, 'admit', ?, ?, '{}', 1, ?, 0)"
)
COUNTS = "SELECT workflow, mode, key, source, n FROM lockgate_pending_counts ORDER BY 1, 2, 3"


def _version(steps: list[tuple[int, str, str]], name: str) -> int:
    return next(version for version, named, _ in steps if named == name)


def _apply(conn: sqlite3.Connection, script: str) -> None:
    """A migration as the store applies it (a column an older file already has is not added twice)."""
    for statement in sqlite_store._split_statements(script):
        if not sqlite_store._adds_an_existing_column(conn, statement):
            conn.execute(statement)


def test_the_sqlite_migration_counts_the_parked_rows_it_finds(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    steps = migrations("sqlite")
    counting = _version(steps, "pending_counts")
    for version, _, script in steps:
        if version < counting:
            _apply(conn, script)
    conn.executemany(INSERT_OLD, OLD_PENDING)
    for version, _, script in steps:
        if version == counting:
            _apply(conn, script)
    assert conn.execute(COUNTS).fetchall() == OLD_COUNTS
    conn.execute("DELETE FROM lockgate_pending WHERE id = 'pnd_4'")
    assert conn.execute(COUNTS).fetchall() == OLD_COUNTS[:2]


@pytest.fixture
def empty_pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request, migrated=False)


async def test_the_postgres_migration_counts_the_parked_rows_it_finds(empty_pg_url: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(empty_pg_url, autocommit=True) as conn:
        steps = migrations("postgres")
        counting = _version(steps, "pending_counts")
        for version, _, script in steps:
            if version < counting:
                await conn.execute(script)  # type: ignore[arg-type]
        async with conn.cursor() as cursor:
            await cursor.executemany(INSERT_OLD.replace("?", "%s"), OLD_PENDING)
        for version, _, script in steps:
            if version == counting:
                await conn.execute(script)  # type: ignore[arg-type]
        cursor = await conn.execute(COUNTS)
        assert await cursor.fetchall() == OLD_COUNTS
        await conn.execute("DELETE FROM lockgate_pending WHERE id = 'pnd_4'")
        cursor = await conn.execute(COUNTS)
        assert await cursor.fetchall() == OLD_COUNTS[:2]
