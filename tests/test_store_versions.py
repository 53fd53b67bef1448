"""Every process that writes refuses a store holding migrations it does not know, naming both versions;
a CLI verb never creates a store (only ``migrate``, ``serve`` and ``demo`` do, and say so)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from lockgate import App, Client, Engine, StoreError
from lockgate.cli import run
from lockgate.store.sql_files import migrations

from .pg import pg_database_url

LATEST = max(version for version, _, _ in migrations("sqlite"))
NEWER = LATEST + 1
APP = "lockgate.demo_app:app"


def lockgate(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(list(argv))
    return code, out.getvalue(), err.getvalue()


def _sql(store_url: str, sql: str) -> list[tuple[object, ...]]:
    if store_url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(store_url.removeprefix("sqlite:///"))) as conn:
            rows = conn.execute(sql).fetchall()
            conn.commit()
            return rows
    with psycopg.connect(store_url, autocommit=True) as pg:
        cursor = pg.execute(sql)
        return cursor.fetchall() if cursor.description else []


def _digest(store_url: str) -> str:
    """The SQLite file's bytes; on PostgreSQL, what could have been written."""
    if store_url.startswith("sqlite:"):
        return hashlib.sha256(Path(store_url.removeprefix("sqlite:///")).read_bytes()).hexdigest()
    counts = _sql(store_url, "SELECT (SELECT count(*) FROM lockgate_runs), (SELECT count(*) FROM lockgate_migrations)")
    return repr(counts)


@pytest.fixture
def newer(store_url: str) -> str:
    """A store migrated by a newer lockgate: it holds a migration this code does not know."""
    assert lockgate("migrate", "--store", store_url)[0] == 0
    _sql(store_url, f"INSERT INTO lockgate_migrations (version, name, applied_at) VALUES ({NEWER}, 'later', 0)")
    return store_url


def _names_both(message: str) -> None:
    assert f"is at schema version {NEWER}" in message, message
    assert f"migration(s) {NEWER:04d} that this lockgate (schema version {LATEST}) does not know" in message, message
    assert "upgrade lockgate" in message


@pytest.mark.parametrize(
    "argv",
    [
        ["migrate"],
        ["workflows", "start", "demo.checkout", "--app", APP, "--payload", '{"order_id": "A", "amount": 1}'],
        ["serve", APP, "--no-http"],
        ["serve", APP, "--no-http", "--no-migrate"],
        ["events", "publish", "demo.order.cancelled", "--app", APP, "--key", '{"order_id": "A"}'],
    ],
)
def test_a_writing_command_refuses_a_newer_store(newer: str, argv: list[str]) -> None:
    before = _digest(newer)
    code, out, err = lockgate(*argv, "--store", newer)
    assert code == 1, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    _names_both(err)
    assert _digest(newer) == before


async def test_engine_and_client_refuse_a_newer_store(newer: str) -> None:
    before = _digest(newer)
    for opened in (Engine(App(), newer), Client(App(), newer)):
        with pytest.raises(StoreError) as refused:
            async with opened:
                pass
        _names_both(str(refused.value))
    assert _digest(newer) == before


# -- no store is created by a verb --------------------------------------------------------------

VERBS = [
    ["workflows", "start", "demo.checkout", "--app", APP, "--payload", '{"order_id": "A", "amount": 1}'],
    ["events", "publish", "demo.order.cancelled", "--app", APP, "--key", '{"order_id": "A"}'],
    ["schedules", "run", "demo.heartbeat", "--app", APP],
    ["schedules", "pause", "demo.heartbeat", "--app", APP],
]


@pytest.mark.parametrize("argv", VERBS)
def test_a_verb_on_a_mistyped_sqlite_store_is_one_line_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert lockgate("migrate", "--store", "sqlite:///shop.db")[0] == 0
    code, out, err = lockgate(*argv, "--store", "sqlite:///shop.bd")
    assert code == 1, out
    assert err == (
        f"error: no lockgate database at {tmp_path / 'shop.bd'} "
        "(run 'lockgate migrate --store sqlite:///shop.bd' to create one)\n"
    )
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("shop.bd")] == []


@pytest.fixture
def empty_url(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A store with no lockgate tables: a SQLite file yet to be, or an empty PostgreSQL database."""
    if store_kind == "sqlite":
        yield f"sqlite:///{tmp_path}/new/lockgate.db"
    else:
        yield from pg_database_url(request, migrated=False)


def test_a_verb_on_a_store_without_lockgate_tables_creates_nothing(empty_url: str, tmp_path: Path) -> None:
    for argv in VERBS:
        code, _, err = lockgate(*argv, "--store", empty_url)
        assert code == 1 and err.startswith("error: no lockgate database at ") and err.count("\n") == 1, err
    if empty_url.startswith("sqlite:"):
        assert list(tmp_path.iterdir()) == []
    else:
        assert _sql(empty_url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]


def test_migrate_says_whether_it_created_the_store(empty_url: str) -> None:
    code, out, _ = lockgate("migrate", "--store", empty_url)
    assert (code, out) == (0, f"created a lockgate database at version {LATEST}: {empty_url}\n")
    code, out, _ = lockgate("migrate", "--store", empty_url)
    assert (code, out) == (0, f"lockgate schema at version {LATEST}: {empty_url}\n")


async def test_engine_and_client_still_create_a_store(store_kind: str, tmp_path: Path) -> None:
    if store_kind != "sqlite":
        pytest.skip("a PostgreSQL database is created by its server; the tables are covered by every test")
    for n, kind in enumerate((Engine, Client)):
        url = f"sqlite:///{tmp_path}/made{n}/lockgate.db"
        async with kind(App(), url):
            pass
        assert Path(url.removeprefix("sqlite:///")).is_file()
