"""Starts and publishes written in the application's own transaction (``conn=``): commit is the start.

On both stores: a commit starts the run; a rollback (or an exception in the application's
transaction) leaves no run, no ledger row, no event and no delivery, and the handle's
``result()`` raises ``StartRolledBack``; a start committed by a process killed right after
its COMMIT runs on a worker; two concurrent application transactions respect a concurrency
limit; SQLAlchemy sessions carry it the same; a connection to another database is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import lockgate as lg

from .apps.txn import ORDERS_SQL, app, order_placed, sqlite_path
from .pg import PG_ADMIN_URL, pg_database_url

ROOT = Path(__file__).resolve().parents[1]
LOCKGATE_TABLES = ("lockgate_runs", "lockgate_ledger", "lockgate_pending", "lockgate_events", "lockgate_deliveries")


class AppDb:
    """The application's own connection to the store's database, and its table of orders."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sqlite = url.startswith("sqlite")
        self.lite: sqlite3.Connection | None = None
        self.pg: psycopg.AsyncConnection[Any] | None = None

    async def open(self) -> None:
        if self.sqlite:
            self.lite = sqlite3.connect(sqlite_path(self.url))
            self.lite.execute(ORDERS_SQL)
            self.lite.commit()
        else:
            self.pg = await psycopg.AsyncConnection.connect(self.url)
            await self.pg.execute(ORDERS_SQL)
            await self.pg.commit()

    async def close(self) -> None:
        if self.lite is not None:
            self.lite.close()
        if self.pg is not None:
            await self.pg.close()

    @property
    def conn(self) -> Any:
        return self.lite if self.sqlite else self.pg

    async def insert(self, order_id: str) -> None:
        """Insert an order; on SQLite this opens the transaction (the sqlite3 module's default mode)."""
        if self.lite is not None:
            self.lite.execute("INSERT INTO app_orders (id, total) VALUES (?, ?)", (order_id, 9.5))
        else:
            assert self.pg is not None
            await self.pg.execute("INSERT INTO app_orders (id, total) VALUES (%s, %s)", (order_id, 9.5))

    async def commit(self) -> None:
        if self.lite is not None:
            self.lite.commit()
        else:
            assert self.pg is not None
            await self.pg.commit()

    async def rollback(self) -> None:
        if self.lite is not None:
            self.lite.rollback()
        else:
            assert self.pg is not None
            await self.pg.rollback()

    async def counts(self) -> dict[str, int]:
        """Committed rows of the orders and lockgate's tables, read on a connection of their own."""
        tables = ("app_orders", *LOCKGATE_TABLES)
        if self.sqlite:
            with sqlite3.connect(sqlite_path(self.url)) as other:
                return {t: other.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as other:
            out = {}
            for t in tables:
                row = await (await other.execute(f"SELECT count(*) FROM {t}")).fetchone()
                assert row is not None
                out[t] = row[0]
            return out


@pytest.fixture
async def db(store_url: str) -> AsyncIterator[AppDb]:
    d = AppDb(store_url)
    await d.open()
    try:
        yield d
    finally:
        await d.close()


@asynccontextmanager
async def engine_on(store_url: str) -> AsyncIterator[lg.Engine]:
    async with lg.Engine(app, store_url, poll_interval=0.05, lease="2s") as engine:
        yield engine


async def test_commit_starts_the_run(store_url: str, db: AppDb) -> None:
    # A client (which writes nothing in the background) waits before the COMMIT: on SQLite an engine's
    # own writes would wait for the application's open write transaction meanwhile.
    async with lg.Client(app, store_url, poll_interval=0.05) as client:
        await db.insert("o1")
        handle = await client.start("txn.fulfil", {"order_id": "o1"}, conn=db.conn)
        assert handle.status == "started" and handle.run_id is not None and handle.ticket
        waiting = asyncio.ensure_future(handle.result(timeout=20))  # before the COMMIT: it waits
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await db.commit()
        async with engine_on(store_url) as engine:
            assert await waiting == "fulfilled o1"
            assert (await engine.get_run(handle.run_id)).status == "succeeded"
            trace = await engine.trace(handle.ticket)
            assert trace.run_id == handle.run_id


async def test_rollback_leaves_nothing(store_url: str, db: AppDb) -> None:
    async with engine_on(store_url) as engine:
        await db.insert("o2")
        handle = await engine.start("txn.fulfil", {"order_id": "o2"}, conn=db.conn)
        event_id = await engine.publish(order_placed, {"order_id": "o2"}, {"total": 9.5}, conn=db.conn)
        assert event_id
        await db.rollback()
        with pytest.raises(lg.StartRolledBack) as caught:
            await handle.result(timeout=5)
        assert caught.value.ticket == handle.ticket
        assert all(n == 0 for n in (await db.counts()).values())
        with pytest.raises(lg.StartRolledBack):  # and again: the handle keeps its answer
            await handle.admitted(timeout=5) and await handle.result(timeout=5)


async def test_publish_in_the_transaction_fires_its_trigger_at_commit(store_url: str, db: AppDb) -> None:
    async with engine_on(store_url) as engine:
        await db.insert("o3")
        event_id = await engine.publish(order_placed, {"order_id": "o3"}, {"total": 1.0}, conn=db.conn)
        assert (await db.counts())["lockgate_events"] == 0  # not before the COMMIT
        await db.commit()
        async with asyncio.timeout(10):
            while True:
                deliveries = await engine.deliveries(event_id)
                if deliveries and deliveries[0].status == "started" and deliveries[0].run_id:
                    break
                await asyncio.sleep(0.02)
        assert await engine.result(deliveries[0].run_id, timeout=10) == "placed o3"


async def test_an_exception_after_the_start_leaves_nothing(store_url: str, db: AppDb) -> None:
    class Boom(Exception):
        pass

    async with engine_on(store_url) as engine:
        with pytest.raises(Boom):
            if db.lite is not None:
                with db.lite:  # the sqlite3 module rolls back on an exception
                    await db.insert("o4")
                    handle = await engine.start("txn.fulfil", {"order_id": "o4"}, conn=db.lite)
                    raise Boom()
            else:
                assert db.pg is not None
                async with db.pg.transaction():
                    await db.insert("o4")
                    handle = await engine.start("txn.fulfil", {"order_id": "o4"}, conn=db.pg)
                    raise Boom()
        with pytest.raises(lg.StartRolledBack):
            await handle.result(timeout=5)
        assert all(n == 0 for n in (await db.counts()).values())


async def test_a_refused_start_leaves_the_application_transaction_usable(store_url: str, db: AppDb) -> None:
    async with engine_on(store_url) as engine:
        await db.insert("o5")
        with pytest.raises(lg.PayloadError):
            await engine.start("txn.fulfil", {"nope": 1}, conn=db.conn)
        with pytest.raises(lg.InvalidArgument):
            await engine.start("txn.fulfil", {"order_id": "o5"}, conn=db.conn, wait=True)
        await db.commit()
        counts = await db.counts()
        assert counts["app_orders"] == 1 and counts["lockgate_runs"] == 0 and counts["lockgate_ledger"] == 0


async def test_a_connection_to_another_database_is_refused(store_url: str, db: AppDb, tmp_path: Path) -> None:
    async with engine_on(store_url) as engine:
        if db.sqlite:
            other = sqlite3.connect(tmp_path / "elsewhere.db")
            other.execute("CREATE TABLE t (x)")
            other.execute("INSERT INTO t VALUES (1)")
            with pytest.raises(lg.ForeignTransaction) as caught:
                await engine.start("txn.fulfil", {"order_id": "x"}, conn=other)
            assert "elsewhere.db" in str(caught.value) and sqlite_path(store_url) in str(caught.value)
            other.close()
        else:
            async with await psycopg.AsyncConnection.connect(PG_ADMIN_URL) as other:
                with pytest.raises(lg.ForeignTransaction) as caught:
                    await engine.start("txn.fulfil", {"order_id": "x"}, conn=other)
                assert "'postgres'" in str(caught.value) and store_url.rsplit("/", 1)[1] in str(caught.value)
                await other.rollback()
        with pytest.raises(lg.ForeignTransaction):  # not a database connection at all
            await engine.start("txn.fulfil", {"order_id": "x"}, conn=object())
        assert all(n == 0 for n in (await db.counts()).values())


async def test_a_connection_outside_a_transaction_is_refused(store_url: str, tmp_path: Path) -> None:
    async with engine_on(store_url) as engine:
        if store_url.startswith("sqlite"):
            conn: Any = sqlite3.connect(sqlite_path(store_url), isolation_level=None)  # autocommit
            with pytest.raises(lg.ForeignTransaction, match="outside a transaction"):
                await engine.start("txn.fulfil", {"order_id": "x"}, conn=conn)
            conn.close()
        else:
            async with await psycopg.AsyncConnection.connect(store_url, autocommit=True) as conn:
                with pytest.raises(lg.ForeignTransaction, match="autocommit"):
                    await engine.start("txn.fulfil", {"order_id": "x"}, conn=conn)
        assert (await engine.list_runs()) == []


def _start_in_thread(store_url: str, order_id: str, hold: float, started: threading.Event, out: list[Any]) -> None:
    """An application transaction of its own (thread, loop, client, connection): start, hold, commit."""

    async def body() -> None:
        async with lg.Client(app, store_url, poll_interval=0.05) as client:
            if store_url.startswith("sqlite"):
                conn = sqlite3.connect(sqlite_path(store_url), timeout=10)
                conn.execute("BEGIN IMMEDIATE")  # SQLite's one writer: the second waits here
                handle = await client.start("txn.limited", {"order_id": order_id, "tenant": "t"}, conn=conn)
                started.set()
                await asyncio.sleep(hold)
                conn.commit()
                conn.close()
            else:
                async with await psycopg.AsyncConnection.connect(store_url) as pg:
                    # The gate's key lock is the transaction's: the second waits for the first's COMMIT here.
                    handle = await client.start("txn.limited", {"order_id": order_id, "tenant": "t"}, conn=pg)
                    started.set()
                    await asyncio.sleep(hold)
                    await pg.commit()
            out.append(handle)

    asyncio.run(body())


async def test_two_concurrent_transactions_respect_a_concurrency_limit(store_url: str) -> None:
    async with engine_on(store_url) as engine:
        handles: list[Any] = []
        first_started, second_started = threading.Event(), threading.Event()
        first = threading.Thread(target=_start_in_thread, args=(store_url, "a", 0.3, first_started, handles))
        first.start()
        assert await asyncio.to_thread(first_started.wait, 10)
        second = threading.Thread(target=_start_in_thread, args=(store_url, "b", 0.0, second_started, handles))
        second.start()
        await asyncio.to_thread(first.join, 15)
        await asyncio.to_thread(second.join, 15)
        assert sorted(h.status for h in handles) == ["queued", "started"]
        running = await engine.list_runs(workflow="txn.limited")
        assert len(running) == 1
        flow = {r.key: r for r in await engine.flow("txn.limited")}
        assert flow["t"].in_flight == 1 and flow["t"].queued == 1


@pytest.mark.slow
async def test_a_start_committed_before_sigkill_runs_on_a_worker(store_url: str, db: AppDb) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT)) if p)}
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tests.apps.txn", store_url, "o9"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -9, proc.stderr.decode()
    handle = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert handle["status"] == "started"
    assert (await db.counts())["app_orders"] == 1
    async with engine_on(store_url) as engine:  # the worker: it finds the committed run and executes it
        assert await engine.result(handle["run_id"], timeout=20) == "fulfilled o9"


# -- SQLAlchemy ------------------------------------------------------------------------------


def _sqlalchemy_url(store_url: str) -> str:
    if store_url.startswith("sqlite"):
        return store_url.replace("sqlite:", "sqlite+pysqlite:", 1)
    return store_url.replace("postgresql:", "postgresql+psycopg:", 1)


async def test_a_sqlalchemy_session_carries_the_start(store_url: str, db: AppDb) -> None:
    sa = create_engine(_sqlalchemy_url(store_url))
    try:
        async with engine_on(store_url) as engine:
            with Session(sa) as session:
                session.execute(text("INSERT INTO app_orders (id, total) VALUES ('s1', 1)"))
                committed = await engine.start("txn.fulfil", {"order_id": "s1"}, conn=session)
                session.commit()
            with Session(sa) as session:
                session.execute(text("INSERT INTO app_orders (id, total) VALUES ('s2', 1)"))
                rolled = await engine.start("txn.fulfil", {"order_id": "s2"}, conn=session)
                session.rollback()
            with sa.begin() as connection:  # a Connection in its transaction
                connection.execute(text("INSERT INTO app_orders (id, total) VALUES ('s3', 1)"))
                third = await engine.start("txn.fulfil", {"order_id": "s3"}, conn=connection)
            assert await committed.result(timeout=10) == "fulfilled s1"
            assert await third.result(timeout=10) == "fulfilled s3"
            with pytest.raises(lg.StartRolledBack):
                await rolled.result(timeout=5)
            counts = await db.counts()
            assert counts["app_orders"] == 2 and counts["lockgate_runs"] == 2
    finally:
        sa.dispose()


async def test_a_sqlalchemy_async_session_carries_the_start(store_url: str, db: AppDb) -> None:
    if store_url.startswith("sqlite"):
        pytest.skip("aiosqlite connections are not sqlite3 ones: a SQLite store takes a sync Session")
    sa = create_async_engine(_sqlalchemy_url(store_url))
    try:
        async with engine_on(store_url) as engine:
            async with AsyncSession(sa) as session:
                await session.execute(text("INSERT INTO app_orders (id, total) VALUES ('a1', 1)"))
                handle = await engine.start("txn.fulfil", {"order_id": "a1"}, conn=session)
                await session.commit()
            async with AsyncSession(sa) as session, session.begin():
                await session.execute(text("INSERT INTO app_orders (id, total) VALUES ('a2', 1)"))
                gone = await engine.start("txn.fulfil", {"order_id": "a2"}, conn=session)
                await session.rollback()
            async with sa.begin() as connection:
                await engine.publish(order_placed, {"order_id": "a3"}, {"total": 2}, conn=connection)
            assert await handle.result(timeout=10) == "fulfilled a1"
            with pytest.raises(lg.StartRolledBack):
                await gone.result(timeout=5)
            counts = await db.counts()
            assert counts["app_orders"] == 1 and counts["lockgate_events"] == 1
    finally:
        await sa.dispose()


# -- PostgreSQL: lockgate's tables in a schema of their own ------------------------------------


@pytest.fixture
def bare_pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request, migrated=False)


async def test_a_store_in_its_own_schema_joins_the_application_transaction(bare_pg_url: str) -> None:
    url = f"{bare_pg_url}?schema=lockgate"
    async with lg.Engine(app, url, poll_interval=0.05, lease="2s") as engine:
        async with await psycopg.AsyncConnection.connect(bare_pg_url) as pg:
            await pg.execute(ORDERS_SQL)  # the application's table, in its own (public) schema
            await pg.execute("INSERT INTO app_orders (id, total) VALUES ('p1', 1)")
            handle = await engine.start("txn.fulfil", {"order_id": "p1"}, conn=pg)
            row = await (await pg.execute("SHOW search_path")).fetchone()
            assert row is not None and "lockgate" not in row[0]  # the application's own path, restored
            await pg.commit()
            assert await handle.result(timeout=10) == "fulfilled p1"
            where = "SELECT table_schema FROM information_schema.tables WHERE table_name = 'lockgate_runs'"
            found = await (await pg.execute(where)).fetchall()
            assert found == [("lockgate",)]


async def test_a_sync_psycopg_connection_carries_the_start(store_url: str, db: AppDb) -> None:
    if db.sqlite:
        pytest.skip("psycopg: PostgreSQL only")
    async with engine_on(store_url) as engine:
        with psycopg.connect(store_url) as sync:
            sync.execute("INSERT INTO app_orders (id, total) VALUES ('y1', 1)")
            handle = await engine.start("txn.fulfil", {"order_id": "y1"}, conn=sync)
            sync.commit()
        assert await handle.result(timeout=10) == "fulfilled y1"


async def test_a_start_parked_in_the_transaction_is_parked_only_if_it_commits(store_url: str, db: AppDb) -> None:
    async with engine_on(store_url) as engine:
        holder = await engine.start("txn.limited", {"order_id": "h", "tenant": "t"})  # takes the one slot
        assert holder.status == "started"
        await db.insert("q1")
        rolled = await engine.start("txn.limited", {"order_id": "q1", "tenant": "t"}, conn=db.conn)
        assert rolled.status == "queued" and rolled.run_id is None
        await db.rollback()
        with pytest.raises(lg.StartRolledBack):
            await rolled.admitted(timeout=5)
        await db.insert("q2")
        kept = await engine.start("txn.limited", {"order_id": "q2", "tenant": "t"}, conn=db.conn)
        assert kept.status == "queued"
        await db.commit()
        counts = await db.counts()
        assert counts["lockgate_pending"] == 1 and counts["lockgate_runs"] == 1
        assert (await engine.trace(kept.ticket)).state == "parked"


def test_a_schema_must_be_a_plain_identifier() -> None:
    with pytest.raises(ValueError, match="schema must be a lower-case identifier"):
        lg.Client(app, "postgresql://postgres@127.0.0.1:5432/x?schema=Bad-Name")
