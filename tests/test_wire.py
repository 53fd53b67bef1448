"""The group commit's pipelined transaction (``store/wire.py``): libpq's pipeline mode, by hand."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from lockgate.store import wire
from lockgate.store.direct import DirectConnection
from lockgate.store.postgres import PostgresTx
from lockgate.store.wire import Unmet, WireTx

from .pg import pg_database_url

QUERIES = {
    "insert": "INSERT INTO w (n, label, doc, x, flag, tags) "
    "VALUES (%(n)s, %(label)s, %(doc)s, %(x)s, %(flag)s, %(tags)s)",
    "insert_back": "INSERT INTO w (n, label) VALUES (%(n)s, %(label)s) RETURNING n, label, x",
    "rows": "SELECT n, label, doc, x, flag, tags, made FROM w ORDER BY n",
    "bump": "UPDATE w SET x = x + 1 WHERE n < %(below)s",
    "fail": "INSERT INTO w (n) VALUES (NULL)",
    "wrong": "SELECT nothing_here FROM w WHERE n = %(n)s",
    "big": "INSERT INTO w (n, label) VALUES (%(n)s, %(label)s)",
    "slow": "SELECT pg_sleep(%(s)s) AS slept",
    "echo": "SELECT %(label)s AS label",
}
SILENT = frozenset({"insert", "bump", "fail", "big", "echo"})  # "echo" returns a row no one reads
TABLE = """
CREATE TABLE w (
    n bigint PRIMARY KEY, label text, doc jsonb, x double precision DEFAULT 0, flag boolean, tags text[],
    made timestamptz DEFAULT '2026-01-02 03:04:05+00'
)
"""


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request, migrated=False)


@contextlib.asynccontextmanager
async def connected(url: str) -> AsyncIterator[DirectConnection[Any]]:
    conn = await DirectConnection.connect(url, autocommit=True, row_factory=dict_row)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def conn(pg_url: str) -> AsyncIterator[DirectConnection[Any]]:
    async with connected(pg_url) as conn:
        await conn.execute(TABLE)
        yield conn


def tx(conn: DirectConnection[Any]) -> WireTx:
    return WireTx(conn, QUERIES, SILENT)


async def table(conn: DirectConnection[Any]) -> list[dict[str, Any]]:
    cursor = await conn.execute(QUERIES["rows"])
    return await cursor.fetchall()


def idle(conn: DirectConnection[Any]) -> bool:
    pgconn = conn.pgconn
    return (
        not conn.closed
        and pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
        and pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    )


ROWS = [
    {"n": 1, "label": "plain", "doc": '{"k": [1, 2.5, "é"]}', "x": 1.25, "flag": True, "tags": ["a", "b c"]},
    {"n": 2**40, "label": "grüße, ☃", "doc": None, "x": 7, "flag": False, "tags": []},
    {"n": -3, "label": None, "doc": "null", "x": None, "flag": None, "tags": None},
    {"n": 4, "label": "", "doc": '"s"', "x": float("inf"), "flag": True, "tags": ["", "NULL", '"q"']},
]


async def test_values_travel_and_rows_come_back_as_psycopg_gives_them(conn: DirectConnection[Any]) -> None:
    async with tx(conn) as t:
        await t.send("BEGIN")
        for row in ROWS:
            assert await t.execute("insert", row) == []  # queued: nothing is read yet
        piped = await t.execute("rows")
        await t.commit()
    assert idle(conn)
    assert piped == await table(conn)  # psycopg's own cursor reads the same dicts, of the same types
    assert [(r["n"], r["label"], r["flag"], r["tags"]) for r in piped] == sorted(
        (r["n"], r["label"], r["flag"], r["tags"]) for r in ROWS
    )
    assert {r["n"]: r["doc"] for r in piped}[1] == {"k": [1, 2.5, "é"]}


async def test_many_rows_in_one_statement_come_back_as_the_unpipelined_transaction_gives_them(
    conn: DirectConnection[Any],
) -> None:
    rows = [{"n": n, "label": f"r{n}"} for n in range(300)]  # chunks of 256, 32, 8 and 4 rows
    async with tx(conn) as t:
        await t.send("BEGIN")
        piped = await t.execute_values("insert_back", rows)
        await t.rollback()
    plain = PostgresTx(conn, QUERIES)
    await conn.execute("BEGIN")
    direct = await plain.execute_values("insert_back", rows)
    await conn.execute("ROLLBACK")
    assert piped == direct == [{"n": n, "label": f"r{n}", "x": 0.0} for n in range(300)]


async def test_each_text_is_prepared_once_per_connection_and_outlives_a_rollback(conn: DirectConnection[Any]) -> None:
    for n, end in ((1, "rollback"), (2, "commit"), (3, "commit")):
        async with tx(conn) as t:
            await t.send("BEGIN")
            await t.execute("big", {"n": n, "label": "x"})
            await t.sync()
            await (t.rollback() if end == "rollback" else t.commit())
    cursor = await conn.execute("SELECT statement FROM pg_prepared_statements WHERE name LIKE 'lockgate_w%'")
    assert [row["statement"] for row in await cursor.fetchall()] == ["INSERT INTO w (n, label) VALUES ($1, $2)"]
    assert [row["n"] for row in await table(conn)] == [2, 3]


async def test_past_the_most_plans_statements_are_sent_unnamed(
    conn: DirectConnection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "_MOST_PLANS", 1)
    async with tx(conn) as t:
        await t.send("BEGIN")
        await t.execute("big", {"n": 1, "label": "prepared"})
        await t.execute("insert", {**ROWS[0], "n": 2})  # a second text: not prepared
        await t.execute("insert", {**ROWS[0], "n": 3})
        assert [row["n"] for row in await t.execute("rows")] == [1, 2, 3]
        await t.commit()
    assert len(conn.plans) == 1
    assert len(await table(conn)) == 3


async def test_a_failed_statement_is_raised_at_the_next_exchange_and_nothing_is_written(
    conn: DirectConnection[Any],
) -> None:
    async with tx(conn) as t:
        await t.send("BEGIN")
        await t.execute("big", {"n": 1, "label": "before"})
        await t.execute("fail")  # queued: its failure is not known yet
        await t.execute("big", {"n": 2, "label": "after"})  # skipped by the server: the pipeline is aborted
        with pytest.raises(psycopg.errors.NotNullViolation):
            await t.sync()
        await t.rollback()
    assert idle(conn)
    assert await table(conn) == []
    async with tx(conn) as t:  # the texts prepared before the failure are used again
        await t.send("BEGIN")
        await t.execute("big", {"n": 5, "label": "again"})
        await t.commit()
    assert [row["n"] for row in await table(conn)] == [5]


async def test_a_text_the_server_cannot_prepare_is_not_kept(conn: DirectConnection[Any]) -> None:
    async with tx(conn) as t:
        await t.send("BEGIN")
        with pytest.raises(psycopg.errors.UndefinedColumn):
            await t.execute("wrong", {"n": 1})
        await t.rollback()
    assert idle(conn)
    assert conn.plans == {}


async def test_a_check_that_changed_too_few_rows_is_unmet(conn: DirectConnection[Any]) -> None:
    async with tx(conn) as t:
        await t.send("BEGIN")
        await t.execute("big", {"n": 1, "label": "one"})
        await t.execute("big", {"n": 2, "label": "two"})
        assert await t.expect_rows("bump", {"below": 3}, 2)  # answered later
        assert not t.settled
        await t.sync()
        assert t.settled and not t.unmet and t.xid is not None
        assert await t.expect_rows("bump", {"below": 2}, 2)  # changes one row
        with pytest.raises(Unmet):
            await t.sync()
        assert t.unmet
        await t.rollback()
    assert idle(conn)


async def test_a_transaction_larger_than_the_sockets_buffers_goes_through(conn: DirectConnection[Any]) -> None:
    """Tens of megabytes each way: the server stops reading while its answers back up, and is read meanwhile."""
    label = "x" * 10_000
    async with tx(conn) as t:
        await t.send("BEGIN")
        for n in range(3_000):
            await t.execute("big", {"n": n, "label": label})
            await t.execute("echo", {"label": label})
        rows = await t.execute("insert_back", {"n": -1, "label": "last"})
        await t.commit()
    assert rows == [{"n": -1, "label": "last", "x": 0.0}]
    cursor = await conn.execute("SELECT count(*) AS n, sum(length(label)) AS chars FROM w")
    assert await cursor.fetchone() == {"n": 3_001, "chars": 3_000 * 10_000 + 4}


async def test_an_exchange_cancelled_with_answers_unread_closes_the_connection(
    conn: DirectConnection[Any], pg_url: str
) -> None:
    with pytest.raises(TimeoutError):
        async with tx(conn) as t:
            await t.send("BEGIN")
            await t.execute("big", {"n": 1, "label": "x"})
            async with asyncio.timeout(0.2):
                await t.execute("slow", {"s": 30})
    assert conn.closed
    async with connected(pg_url) as other:
        assert await table(other) == []


async def test_a_connection_ended_mid_transaction_fails_the_exchange_and_is_closed(
    conn: DirectConnection[Any], pg_url: str
) -> None:
    with pytest.raises(psycopg.OperationalError):
        async with tx(conn) as t:
            await t.send("BEGIN")
            await t.execute("big", {"n": 1, "label": "x"})
            await t.sync()
            async with connected(pg_url) as admin:
                await admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
            await t.execute("big", {"n": 2, "label": "y"})
            await t.commit()
    assert conn.closed and not conn.watching
    async with connected(pg_url) as other:
        assert await table(other) == []
