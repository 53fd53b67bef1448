"""What only the PostgreSQL store does: URL options, concurrent boots, LISTEN/NOTIFY, outages."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest

from lockgate.errors import StoreError
from lockgate.store import Tx, open_store, runs, shared, workers
from lockgate.store import journal as store_journal
from lockgate.store.base import LISTENING
from lockgate.store.direct import DirectConnection, DirectStatement, numbered
from lockgate.store.postgres import PostgresStore, PostgresTx, _silent
from lockgate.store.postgres.failures import cannot_connect
from lockgate.store.sql_files import load_queries, migrations, repeatable_queries, silent_queries

from .pg import PgProxy, pg_database_url
from .pgserver import free_port


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated PostgreSQL database of this test's own."""
    yield from pg_database_url(request)


@pytest.fixture
def empty_pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request, migrated=False)


@pytest.fixture
async def opened() -> AsyncIterator[Callable[[str], Any]]:
    """``await opened(url)``: an open ``PostgresStore``, closed at the end of the test."""
    stores: list[PostgresStore] = []

    async def make(url: str) -> PostgresStore:
        store = PostgresStore(url)
        await store.open()
        stores.append(store)
        return store

    yield make
    for store in stores:
        await store.close()


def run_row(run_id: str) -> dict[str, Any]:
    return {"id": run_id, "workflow": "w", "payload": "{}", "patches": "[]"}


async def count_runs(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute("SELECT COUNT(*) FROM lockgate_runs")
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


async def until(
    predicate: Callable[[], bool], *, timeout: float = 10.0, every: Callable[[], Any] | None = None
) -> None:
    """Wait for ``predicate`` (calling ``every`` between looks), failing after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        if every is not None:
            outcome = every()
            if asyncio.iscoroutine(outcome):
                await outcome
        await asyncio.sleep(0.02)


def outage_lines(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    messages = [r.getMessage() for r in caplog.records if r.name == "lockgate.store"]
    return (
        sum("database unreachable" in m and "(will retry)" in m for m in messages),
        sum("database reachable again" in m for m in messages),
    )


# -- URL and boot ----------------------------------------------------------------------------


def test_url_options_are_validated_and_the_rest_go_to_libpq() -> None:
    store = PostgresStore("postgresql://u@h/db?pool_size=2&pool_timeout=0.5&application_name=x")
    assert (store.pool_size, store.pool_timeout) == (2, 0.5)
    assert "pool_size" not in store.conninfo and "pool_timeout" not in store.conninfo
    assert "application_name=x" in store.conninfo
    assert isinstance(open_store("postgres://u@h/db"), PostgresStore)
    with pytest.raises(ValueError, match="pool_size must be a positive integer"):
        PostgresStore("postgresql://u@h/db?pool_size=0")
    with pytest.raises(ValueError, match="pool_timeout must be a positive number"):
        PostgresStore("postgresql://u@h/db?pool_timeout=soon")


@pytest.mark.parametrize("first", ["nohost.invalid:5432", "nohost.invalid"])
async def test_a_host_whose_name_does_not_resolve_is_named_in_the_one_line_error(first: str) -> None:
    """The driver drops such a host without a word when another resolves: the line names every host."""
    port = free_port()
    for where, said in [
        (f"postgresql://postgres@{first},127.0.0.1:{port}/x", f"127.0.0.1:{port} Connection refused"),
        (f"postgresql://postgres@{first},other.invalid:5433/x", "other.invalid:5433 name not resolved"),
    ]:
        with pytest.raises(psycopg.OperationalError) as caught:
            await psycopg.AsyncConnection.connect(f"{where}?connect_timeout=5")
        line = str(cannot_connect(where, caught.value))
        assert line.startswith(f"no host of {where} could be used: nohost.invalid:5432 name not resolved; "), line
        assert line.endswith(said) and "\n" not in line, line


def test_an_engines_lease_sets_how_soon_a_dead_link_is_found() -> None:
    """Half the lease of unacknowledged data, keepalives at a third of it; the URL's own kept."""
    store = PostgresStore("postgresql://u@h/db?keepalives_count=5")
    assert "tcp_user_timeout=10000" in store.conninfo and store.stalled_after == 10.0  # no engine: the defaults
    store.fit_lease(5.0)
    assert "tcp_user_timeout=2500" in store.conninfo and "keepalives_idle=2" in store.conninfo
    assert "keepalives_interval=1" in store.conninfo and "keepalives_count=5" in store.conninfo
    assert "keepalives_count=3" not in store.conninfo and store.stalled_after == 5.0
    store.fit_lease(1.0)
    assert "tcp_user_timeout=2000" in store.conninfo and "keepalives_idle=1" in store.conninfo
    store.fit_lease(60.0)  # never longer than the defaults
    assert "tcp_user_timeout=10000" in store.conninfo and "keepalives_idle=5" in store.conninfo
    assert store.stalled_after == 10.0
    mine = PostgresStore("postgresql://u@h/db?tcp_user_timeout=30000")
    mine.fit_lease(5.0)
    assert "tcp_user_timeout=30000" in mine.conninfo and mine.conninfo.count("tcp_user_timeout") == 1


async def test_unknown_options_reach_the_server(pg_url: str, opened: Any) -> None:
    options = "options=-c%20statement_timeout%3D4321"  # a space in an option must reach libpq as one
    store = await opened(f"{pg_url}?application_name=lockgate-probe&pool_size=2&{options}")

    async def probe(tx: Tx) -> Any:
        assert isinstance(tx, PostgresTx)
        cursor = await tx.conn.execute(
            "SELECT current_setting('application_name') AS app, current_setting('statement_timeout') AS timeout"
        )
        return await cursor.fetchone()

    assert await store.read(probe) == {"app": "lockgate-probe", "timeout": "4321ms"}


_PLANNING = "SELECT current_setting('enable_seqscan') AS seqscan, current_setting('jit') AS jit"


async def test_every_session_plans_without_sequential_scans_or_jit_unless_it_chose(pg_url: str, opened: Any) -> None:
    """Reads and the writer alike (connections.PLANNER); a client's own setting is kept."""

    async def read_settings(tx: Tx) -> Any:
        assert isinstance(tx, PostgresTx)
        return await (await tx.conn.execute(_PLANNING)).fetchone()

    store = await opened(pg_url)
    assert await store.read(read_settings) == {"seqscan": "off", "jit": "off"}
    writer = await store._writer_connection()
    assert await (await writer.execute(_PLANNING)).fetchone() == {"seqscan": "off", "jit": "off"}
    mine = await opened(f"{pg_url}?options=-c%20enable_seqscan%3Don%20-c%20jit%3Don")
    assert await mine.read(read_settings) == {"seqscan": "on", "jit": "on"}


async def test_an_unreachable_server_is_a_clear_error_without_the_password() -> None:
    store = PostgresStore("postgresql://lockgate:s3cret@127.0.0.1:1/nowhere")
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL") as caught:
        await asyncio.wait_for(store.open(), 30)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(StoreError, match="not open"):
        await store.read(workers.list_workers)


async def test_an_answer_begun_before_an_outage_does_not_end_it(caplog: pytest.LogCaptureFixture) -> None:
    """A query sent before the outage was said and answered as the server went is no sign it is back:
    the next failure of that outage is not said again (one outage, one line each way)."""
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/nowhere")
    lost = psycopg.OperationalError("server closed the connection unexpectedly")
    with caplog.at_level(logging.WARNING, logger="lockgate.store"):
        begun = time.monotonic()
        await store._trouble(lost)
        store._reachable(begun)  # begun before the outage was said
        await store._trouble(lost)  # the same outage
        store._reachable(time.monotonic())  # begun since: the server answers again
        await store._trouble(lost)  # a new outage
    said = [r.getMessage().split(" at ")[0] for r in caplog.records if r.name == "lockgate.store"]
    assert said == ["database unreachable", "database reachable again", "database unreachable"]


async def test_processes_booting_together_migrate_once(empty_pg_url: str) -> None:
    stores = [PostgresStore(empty_pg_url) for _ in range(3)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        await stores[0].write(workers.register_worker, "w1", "host", 1, 1.0)
        async with await psycopg.AsyncConnection.connect(empty_pg_url) as conn:
            cursor = await conn.execute("SELECT version FROM lockgate_migrations ORDER BY version")
            versions = [r[0] for r in await cursor.fetchall()]
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    assert versions == [v for v, _, _ in migrations("postgres")]


async def test_rows_have_the_python_types_of_sqlite_rows(pg_url: str, opened: Any) -> None:
    store = await opened(pg_url)
    _, created = await store.write(runs.create_run, run_row("r1"), 1700000000.5)
    assert created
    row = await store.read(shared.get_run, "r1")
    assert type(row["created_at"]) is float and row["created_at"] == 1700000000.5
    assert type(row["epoch"]) is int and type(row["entries"]) is int
    assert type(row["id"]) is str and row["finished_at"] is None
    assert await store.read(runs.next_wake) == 1700000000.5
    events = await store.read(store_journal.list_events, "r1")
    assert [type(e["id"]) for e in events] == [int]


# -- wake-ups ----------------------------------------------------------------------------------


async def test_wakeups_reach_other_stores_once_committed(pg_url: str, opened: Any) -> None:
    sender, receiver = await opened(pg_url), await opened(pg_url)
    assert sender.cross_process_wakeups
    heard: list[tuple[str, str]] = []
    own: list[tuple[str, str]] = []
    receiver.add_listener(lambda channel, payload: heard.append((channel, payload)))
    sender.add_listener(lambda channel, payload: own.append((channel, payload)))

    async def publish(tx: Tx, payload: str, refuse: bool = False) -> None:
        await sender.notify(tx, "runs", payload)
        if refuse:
            raise ValueError("refused")

    # The listener connects in the background: publish until one arrives.
    await until(lambda: bool(heard), every=lambda: sender.write(publish, "hello"))
    heard.clear()
    outcomes = await asyncio.gather(
        sender.write(publish, "rolled-back", True), sender.write(publish, "kept"), return_exceptions=True
    )
    assert isinstance(outcomes[0], ValueError) and outcomes[1] is None
    await until(lambda: ("runs", "kept") in heard)
    assert ("runs", "rolled-back") not in heard  # NOTIFY in a rolled-back savepoint is never sent
    assert own == [(LISTENING, "")]  # a store does not hear itself: only that it began to listen


async def test_a_wakeup_payload_over_the_server_limit_is_refused(pg_url: str, opened: Any) -> None:
    store = await opened(pg_url)

    async def publish(tx: Tx) -> None:
        await store.notify(tx, "runs", "x" * 9000)

    with pytest.raises(ValueError, match="PostgreSQL allows under 8000"):
        await store.write(publish)


async def test_the_listener_reconnects_after_its_connection_drops(
    pg_url: str, proxy: PgProxy, opened: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lockgate.store")
    sender, receiver = await opened(pg_url), await opened(proxy.url(pg_url))
    heard: list[str] = []
    receiver.add_listener(lambda _channel, payload: heard.append(payload))

    async def publish(tx: Tx, payload: str) -> None:
        await sender.notify(tx, "runs", payload)

    await until(lambda: "before" in heard, every=lambda: sender.write(publish, "before"))
    await proxy.stop()
    await proxy.start()
    await until(lambda: "after" in heard, every=lambda: sender.write(publish, "after"))
    assert outage_lines(caplog) == (1, 1)


# -- outages -----------------------------------------------------------------------------------


async def test_a_connection_lost_before_commit_is_retried_on_a_fresh_one(
    pg_url: str, proxy: PgProxy, opened: Any
) -> None:
    store = await opened(proxy.url(pg_url))
    calls = 0

    async def register(tx: Tx) -> str:
        nonlocal calls
        calls += 1
        await workers.register_worker(tx, "w1", "host", 1, 1.0)
        return "done"

    proxy.cut_when(b"lockgate_workers")  # the op's own statement never reaches the server
    assert await store.write(register) == "done"
    assert (proxy.cuts, calls) == (1, 2)
    assert [w["id"] for w in await store.read(workers.list_workers)] == ["w1"]


async def test_a_read_whose_connection_drops_is_retried(pg_url: str, proxy: PgProxy, opened: Any) -> None:
    store = await opened(proxy.url(pg_url))
    await store.write(workers.register_worker, "w1", "host", 1, 1.0)
    proxy.cut_when(b"runs_held")  # the list_workers query
    assert [w["id"] for w in await store.read(workers.list_workers)] == ["w1"]
    assert proxy.cuts == 1


def counting_create(run_id: str) -> tuple[Callable[[Tx], Any], list[int]]:
    """An op creating run ``run_id``, and the list its calls are counted in.

    Its insert returns a row, so the transaction's id is known before COMMIT is sent, and
    COMMIT travels with the op's last statement.
    """
    calls: list[int] = []

    async def create(tx: Tx) -> None:
        calls.append(1)
        await runs.create_run(tx, run_row(run_id), 1.0)

    return create, calls


def counting_events(run_id: str) -> tuple[Callable[[Tx], Any], list[int]]:
    """An op whose statements are all sent without waiting (COMMIT follows a sync that learns the id)."""
    calls: list[int] = []

    async def add(tx: Tx) -> None:
        calls.append(1)
        for n in range(3):
            await shared.add_event(tx, run_id, f"e{n}", 1.0, None)

    return add, calls


async def count_events(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute("SELECT COUNT(*) FROM lockgate_run_events")
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


# Both ways COMMIT leaves: with the op's last statement (its insert returned a row, so the
# transaction's id was known), or after a sync that learns the id (every statement was pipelined).
COMMIT_PATHS = [
    pytest.param(counting_create, count_runs, 1, id="commit-with-last-statement"),
    pytest.param(counting_events, count_events, 3, id="commit-after-sync"),
]
Counting = Callable[[str], tuple[Callable[[Tx], Any], list[int]]]


@pytest.mark.parametrize(("counting", "count", "rows"), COMMIT_PATHS)
async def test_a_commit_that_never_reached_the_server_is_run_again(
    pg_url: str, proxy: PgProxy, opened: Any, counting: Counting, count: Callable[[str], Any], rows: int
) -> None:
    store = await opened(proxy.url(pg_url))
    op, calls = counting("r1")
    proxy.cut_when(b"COMMIT")
    await store.write(op)
    assert (proxy.cuts, len(calls)) == (1, 2)  # the server said the first try was aborted
    assert await count(pg_url) == rows


@pytest.mark.parametrize(("counting", "count", "rows"), COMMIT_PATHS)
async def test_a_commit_whose_answer_was_lost_is_acknowledged_not_run_again(
    pg_url: str, proxy: PgProxy, opened: Any, counting: Counting, count: Callable[[str], Any], rows: int
) -> None:
    store = await opened(proxy.url(pg_url))
    op, calls = counting("r1")
    proxy.cut_when(b"COMMIT", deliver=True)
    await store.write(op)
    assert (proxy.cuts, len(calls)) == (1, 1)  # the server said it committed: running it again would double it
    assert await count(pg_url) == rows


async def test_a_session_left_holding_the_transaction_is_ended_and_the_batch_run_again(
    pg_url: str, proxy: PgProxy, opened: Any
) -> None:
    store = await opened(proxy.url(pg_url))
    create, calls = counting_create("r1")
    proxy.cut_when(b"COMMIT", leave_server_waiting=True)  # the server still holds the transaction open
    await asyncio.wait_for(store.write(create), 60)
    assert (proxy.cuts, len(calls)) == (1, 2)
    assert await count_runs(pg_url) == 1


async def test_a_commit_whose_outcome_cannot_be_learnt_is_reported(pg_url: str, proxy: PgProxy, opened: Any) -> None:
    store = await opened(f"{proxy.url(pg_url)}&pool_timeout=0.2&pool_size=1")
    create, calls = counting_create("r1")
    proxy.cut_when(b"COMMIT", then_refuse=True)  # and the server stays away: no connection can ask it
    with pytest.raises(StoreError, match="may or may not have been applied"):
        await asyncio.wait_for(store.write(create), 60)
    assert len(calls) == 1
    await proxy.start()
    await store.write(runs.create_run, run_row("r2"), 2.0)  # the store carries on once the server is back
    assert await count_runs(pg_url) == 1  # here the COMMIT never reached the server


async def test_a_server_restart_loses_no_acknowledged_write(
    pg_url: str, proxy: PgProxy, opened: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lockgate.store")
    store = await opened(proxy.url(pg_url))
    await store.write(runs.create_run, run_row("r0"), 1.0)
    await proxy.stop()
    writes = [asyncio.ensure_future(store.write(runs.create_run, run_row(f"r{i}"), 2.0)) for i in range(1, 21)]
    await until(lambda: outage_lines(caplog)[0] == 1)  # the writer found the server gone
    await proxy.start()
    results = await asyncio.wait_for(asyncio.gather(*writes), 60)
    assert all(created for _, created in results)
    assert await count_runs(pg_url) == 21
    assert [r["id"] for r in await store.read(runs.list_runs, limit=100)][-1] == "r0"
    assert outage_lines(caplog) == (1, 1)  # once per outage, not once per query


@pytest.mark.slow
async def test_a_lasting_outage_fails_writes_and_reads_instead_of_hanging(
    pg_url: str, proxy: PgProxy, opened: Any
) -> None:
    store = await opened(f"{proxy.url(pg_url)}&pool_timeout=0.2")
    await store.write(workers.register_worker, "w1", "host", 1, 1.0)
    await proxy.stop()
    with pytest.raises(StoreError, match="unreachable"):
        await asyncio.wait_for(store.write(workers.register_worker, "w2", "host", 1, 2.0), 60)
    with pytest.raises(StoreError, match="unreachable"):
        await asyncio.wait_for(store.read(workers.list_workers), 60)
    await proxy.start()
    assert len(await asyncio.wait_for(store.read(workers.list_workers), 60)) == 1


async def test_a_migration_by_another_process_does_not_break_prepared_statements(pg_url: str, opened: Any) -> None:
    store = await opened(f"{pg_url}?pool_size=1")
    await store.write(runs.create_run, run_row("r1"), 1.0)
    for _ in range(8):  # past psycopg's threshold: get_run is now prepared on the pooled connection
        await store.read(shared.get_run, "r1")
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("ALTER TABLE lockgate_runs ADD COLUMN added_later TEXT")
    assert "added_later" in await store.read(shared.get_run, "r1")
    for _ in range(8):
        await store.write(shared.get_run, "r1")
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("ALTER TABLE lockgate_runs ADD COLUMN added_even_later TEXT")
    assert "added_even_later" in await store.write(shared.get_run, "r1")


# -- a step's journal entry: one statement, committed alone ---------------------------------------

ENTRY = {"step_key": "s#1", "seq": 1, "kind": "step", "status": "completed", "output": "1", "attempts": 1}


async def held_run(store: PostgresStore, run_id: str = "r1") -> shared.Fence:
    """A running run held by worker ``w1`` (epoch 1), and the fence its writes carry."""
    await store.write(runs.create_run, {**run_row(run_id), "owner": "w1", "epoch": 1, "lease_until": 1e12}, 1.0)
    return shared.Fence(run_id, "w1", 1)


async def journal(url: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute("SELECT run_id, step_key, status, output FROM lockgate_journal ORDER BY step_key")
        return await cursor.fetchall()


async def test_a_step_entry_commits_without_a_transaction_around_it(pg_url: str, proxy: PgProxy, opened: Any) -> None:
    store = await opened(proxy.url(pg_url))
    fence = await held_run(store)
    proxy.cut_when(b"BEGIN")  # any transaction the writer opens from here is cut
    await store.write(store_journal.record_entry, fence, ENTRY, 2.0)
    assert proxy.cuts == 0
    assert await journal(pg_url) == [("r1", "s#1", "completed", "1")]


async def test_a_step_entry_with_more_to_write_goes_in_a_transaction(pg_url: str, opened: Any) -> None:
    store = await opened(pg_url)
    fence = await held_run(store)
    await store.write(store_journal.record_entry, fence, ENTRY, 5.0, progress=True)  # and the run's progress_at
    row = await store.read(shared.get_run, "r1")
    assert row["progress_at"] == 5.0
    assert await journal(pg_url) == [("r1", "s#1", "completed", "1")]


@pytest.mark.parametrize("deliver", [False, True], ids=["never-reached", "answer-lost"])
@pytest.mark.parametrize("earlier", [0, 3], ids=["first-on-its-connection", "prepared"])
async def test_a_step_entry_whose_connection_drops_is_written_once(
    pg_url: str, proxy: PgProxy, opened: Any, deliver: bool, earlier: int
) -> None:
    store = await opened(proxy.url(pg_url))
    fence = await held_run(store)
    for i in range(earlier):  # from its second run on a connection, the statement goes by its prepared name
        await store.write(store_journal.record_entry, fence, {**ENTRY, "step_key": f"e#{i}", "seq": i + 2}, 2.0)
    # With deliver, it committed: running it again is harmless.
    proxy.cut_when(b"lockgate_direct" if earlier else b"lockgate_journal", deliver=deliver)
    await store.write(store_journal.record_entry, fence, ENTRY, 2.0)
    assert proxy.cuts == 1
    assert ("r1", "s#1", "completed", "1") in await journal(pg_url)
    assert len(await journal(pg_url)) == earlier + 1


async def test_a_step_entry_keeps_every_value_exactly(pg_url: str, opened: Any) -> None:
    """Sent in text form through libpq, each value reads back as psycopg would have written it."""
    store = await opened(pg_url)
    fence = await held_run(store)
    odd = "quote ' double \" backslash \\ percent %% %(x)s $1 tab\t newline\n é 漢字 🙂"
    entries = [
        {**ENTRY, "step_key": f"v#{i}", "seq": i, "output": output, "error_message": message, "due_at": due}
        for i, (output, message, due) in enumerate(
            [
                (odd, None, 1e300),
                ("", "", -0.0),
                (None, odd, 0.1 + 0.2),
                ('{"a": [1, 2.5, null]}', "x" * 10_000, float("inf")),
                ("last", None, 1733212345.123456),
            ]
        )
    ]
    for entry in entries:
        await store.write(store_journal.record_entry, fence, entry, 2.0)
    rows = {r["step_key"]: r for r in await store.read(store_journal.load_journal, "r1")}
    for entry in entries:
        row = rows[entry["step_key"]]
        assert (row["output"], row["error_message"], row["due_at"], row["seq"]) == (
            entry["output"],
            entry["error_message"],
            entry["due_at"],
            entry["seq"],
        )


async def test_a_step_entry_with_a_nul_is_refused_and_nothing_is_written(pg_url: str, opened: Any) -> None:
    store = await opened(pg_url)
    fence = await held_run(store)
    for _ in range(3):  # on a first run and on a prepared one alike
        with pytest.raises(StoreError, match="NUL"):
            await store.write(store_journal.record_entry, fence, {**ENTRY, "error_message": "a\x00b"}, 2.0)
    assert await journal(pg_url) == []
    await store.write(store_journal.record_entry, fence, ENTRY, 2.0)
    assert await journal(pg_url) == [("r1", "s#1", "completed", "1")]


@contextlib.asynccontextmanager
async def direct_table(url: str) -> AsyncIterator[tuple[DirectConnection[Any], DirectStatement]]:
    """A ``DirectConnection`` to ``url`` (closed at the end) and a direct insert into a table of its own."""
    conn = await DirectConnection.connect(url, autocommit=True)
    try:
        await conn.execute("CREATE TABLE direct_t (n integer)")
        yield conn, DirectStatement("direct_t", "INSERT INTO direct_t (n) VALUES (%(n)s)")
    finally:
        await conn.close()


async def test_direct_statements_keep_their_reader_and_hand_the_socket_to_psycopg_between_them(pg_url: str) -> None:
    async with direct_table(pg_url) as (conn, insert):
        for n in range(4):
            await insert.run(conn, {"n": n})
            assert conn.watching  # left registered after the answer
            cursor = await conn.execute("SELECT count(*) FROM direct_t")  # psycopg waits on the socket itself
            assert conn.watching is False
            assert await cursor.fetchone() == (n + 1,)
        async with conn.pipeline():
            await conn.execute("INSERT INTO direct_t (n) VALUES (10)")
        assert await insert.run(conn, {"n": 11}) == 1
    assert conn.watching is False


async def test_a_direct_connection_the_server_ends_while_idle_is_let_go_by_the_loop(pg_url: str) -> None:
    async with direct_table(pg_url) as (conn, insert):
        for n in range(3):
            await insert.run(conn, {"n": n})
        assert conn.watching
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        await until(lambda: not conn.watching)  # it read the end of the connection, and stopped watching the socket
        # The socket's number is free again: whoever gets it next is watched afresh, and answered.
        for _ in range(3):
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
                cursor = await other.execute("SELECT count(*) FROM direct_t")
                assert await cursor.fetchone() == (3,)
        with pytest.raises(psycopg.OperationalError):
            await insert.run(conn, {"n": 3})
        assert conn.watching is False


@contextlib.asynccontextmanager
async def run_row_locked(url: str, run_id: str = "r1") -> AsyncIterator[None]:
    """Hold ``run_id``'s row locked from another session: a journal write for it waits until the block ends."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.execute("SELECT 1 FROM lockgate_runs WHERE id = %s FOR UPDATE", (run_id,))
        yield
        await conn.rollback()


async def waiting_on_a_lock(url: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        row = await cursor.fetchone()
        return row is not None and row[0] > 0


async def blocked_entry(store: PostgresStore, fence: shared.Fence, url: str) -> asyncio.Future[None]:
    """``ENTRY`` written for ``fence``'s run, once it waits at the server (inside ``run_row_locked``)."""
    entry = asyncio.ensure_future(store.write(store_journal.record_entry, fence, ENTRY, 2.0))
    for _ in range(500):
        if await waiting_on_a_lock(url):
            return entry
        await asyncio.sleep(0.01)
    raise AssertionError("the journal write never reached the server")


async def test_writes_queued_behind_a_step_entry_in_flight_are_committed_together_after_it(
    pg_url: str, opened: Any
) -> None:
    store = await opened(pg_url)
    fence = await held_run(store)
    before = store.commits
    async with run_row_locked(pg_url):
        entry = await blocked_entry(store, fence, pg_url)
        queued = asyncio.gather(*(store.write(runs.create_run, run_row(f"q{i}"), 1.0) for i in range(3)))
        await asyncio.sleep(0.05)
        assert not entry.done() and not queued.done()
    await asyncio.wait_for(asyncio.gather(entry, queued), 10)
    assert store.commits == before + 2  # the entry alone, then the three in one transaction
    assert await count_runs(pg_url) == 4
    assert await journal(pg_url) == [("r1", "s#1", "completed", "1")]


async def test_a_burst_of_step_entries_shares_its_commits(pg_url: str, opened: Any) -> None:
    store = await opened(pg_url)
    fences = [await held_run(store, f"r{i}") for i in range(10)]
    before = store.commits
    await asyncio.gather(*(store.write(store_journal.record_entry, fence, ENTRY, 2.0) for fence in fences))
    # The first may go at once on its own; the others queue behind it and share one transaction.
    assert store.commits - before <= 2
    assert len(await journal(pg_url)) == 10


async def test_a_step_entry_whose_caller_is_cancelled_leaves_the_writer_sound(pg_url: str, opened: Any) -> None:
    store = await opened(pg_url)
    fence = await held_run(store)
    async with run_row_locked(pg_url):
        entry = await blocked_entry(store, fence, pg_url)
        entry.cancel()
        with pytest.raises(asyncio.CancelledError):
            await entry
        later = asyncio.ensure_future(store.write(runs.create_run, run_row("r2"), 1.0))
        await asyncio.sleep(0.05)
        assert not later.done()  # the connection still owes the cancelled statement's answer
    await asyncio.wait_for(later, 10)
    await store.write(store_journal.record_entry, fence, {**ENTRY, "step_key": "s#2", "seq": 2}, 3.0)
    # The statement was out when its caller left: it committed, as a queued write would have.
    assert [key for _, key, _, _ in await journal(pg_url)] == ["s#1", "s#2"]
    assert await count_runs(pg_url) == 2


async def test_closing_waits_for_a_step_entry_in_flight(pg_url: str, opened: Any) -> None:
    store = await opened(pg_url)
    fence = await held_run(store)
    async with run_row_locked(pg_url):
        entry = await blocked_entry(store, fence, pg_url)
        closing = asyncio.ensure_future(store.close())
        await asyncio.sleep(0.05)
        assert not closing.done()
    await asyncio.wait_for(asyncio.gather(entry, closing), 10)
    assert await journal(pg_url) == [("r1", "s#1", "completed", "1")]


async def test_a_step_entry_of_a_run_held_elsewhere_is_fenced(pg_url: str, opened: Any) -> None:
    store = await opened(pg_url)
    await held_run(store)
    with pytest.raises(shared.Fenced):
        await store.write(store_journal.record_entry, shared.Fence("r1", "w2", 1), ENTRY, 2.0)
    with pytest.raises(shared.Fenced):
        await store.write(store_journal.record_entry, shared.Fence("r1", "w1", 2), ENTRY, 2.0)
    assert await journal(pg_url) == []


async def test_a_runs_own_writes_find_it_by_id_however_many_runs_are_in_flight(pg_url: str) -> None:
    """A plan a session caches while the table is small reaches the run by its id, whatever index it takes.

    Through an index on its status or its owner alone, each write of a run would walk every
    running run (or every run of its worker): cost growing with the runs in flight.
    """
    queries = load_queries("postgres")
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        for name in ("upsert_journal", "finish_run_plain", "finish_run", "fence_touch", "release_run"):
            sql, names = numbered(queries[name])
            await conn.execute(f"PREPARE p_{name} AS {sql}")
            cursor = await conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE p_{name}({', '.join(['NULL'] * len(names))})")
            row = await cursor.fetchone()
            assert row is not None
            by_id = f"(id = ${names.index('run_id') + 1})"
            nodes = _plan_nodes(row[0][0]["Plan"])
            scans = [n for n in nodes if n.get("Alias") == "lockgate_runs" and n["Node Type"].endswith("Scan")]
            assert scans, name
            for scan in scans:
                assert by_id in scan.get("Index Cond", ""), (name, scan)


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def test_repeatable_queries_are_marked_writes_without_rows_to_read() -> None:
    """Rows a CTE's write returns feed the statement's own next write; the statement itself returns none."""
    queries, marked = load_queries("postgres"), repeatable_queries("postgres")
    assert {"upsert_journal", "start_bare_run"} <= marked
    for name in marked:
        assert not re.search(r"RETURNING[^()]*$", queries[name].strip().rstrip(";"), re.IGNORECASE), name


def test_a_keys_lock_and_a_bursts_parked_rows_are_sent_without_waiting() -> None:
    """Pipelined, the writer waits only for rows an op reads: a key's lock returns a row nobody reads."""
    queries = load_queries("postgres")
    sent = _silent(queries)
    assert "lock_key" in silent_queries("postgres") and silent_queries("postgres") <= sent
    assert {"insert_ledger_rows", "insert_pending_rows"} <= sent
    assert not {"insert_ledger", "slot_queues", "waiting_ahead"} & sent  # their rows are read
