"""The SQLite and PostgreSQL stores stay in lockstep: same tables, columns and named queries."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.store.postgres import PostgresStore
from lockgate.store.sql_files import load_queries, migrations
from lockgate.store.sqlite import SQLiteStore

from .pg import pg_database_url

SRC = Path(__file__).resolve().parents[1] / "src" / "lockgate"

# The PostgreSQL types a column of each SQLite declared type is mirrored with.
SAME_TYPE = {
    "TEXT": {"text"},
    "REAL": {"double precision"},
    "INTEGER": {"integer", "bigint"},
}

Schema = dict[str, dict[str, str]]  # table -> column -> type


@pytest.fixture
def empty_pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty PostgreSQL database: the migrations, not the test template, build its schema."""
    yield from pg_database_url(request, migrated=False)


async def sqlite_schema(path: Path) -> tuple[Schema, set[str]]:
    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        schema = {
            t: {r[1]: r[2].upper() for r in conn.execute(f'PRAGMA table_info("{t}")')}
            for t in tables
            if not t.startswith("sqlite_")
        }
        indexes = {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
        }
    finally:
        conn.close()
    return schema, indexes


async def postgres_schema(url: str) -> tuple[Schema, set[str]]:
    import psycopg

    store = PostgresStore(url)
    await store.open()
    await store.close()
    async with await psycopg.AsyncConnection.connect(url) as conn:
        # The partitions of the run history (docs/history.md) are PostgreSQL's own: their parents are compared.
        cursor = await conn.execute(
            "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c "
            "JOIN pg_class k ON k.relname = c.table_name AND k.relnamespace = current_schema()::regnamespace "
            "WHERE c.table_schema = current_schema() AND NOT k.relispartition"
        )
        schema: Schema = {}
        for table, column, data_type in await cursor.fetchall():
            schema.setdefault(table, {})[column] = data_type
        cursor = await conn.execute(
            "SELECT i.indexname FROM pg_indexes i "
            "JOIN pg_class t ON t.relname = i.tablename AND t.relnamespace = current_schema()::regnamespace "
            "WHERE i.schemaname = current_schema() AND NOT t.relispartition AND NOT EXISTS "
            "(SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)"
        )
        indexes = {r[0] for r in await cursor.fetchall()}
    return schema, indexes


async def test_migrations_build_the_same_tables_and_columns(tmp_path: Path, empty_pg_url: str) -> None:
    lite, lite_indexes = await sqlite_schema(tmp_path / "schema.db")
    pg, pg_indexes = await postgres_schema(empty_pg_url)
    assert "lockgate_runs" in lite and "lockgate_migrations" in lite
    assert sorted(pg) == sorted(lite)
    for table, columns in lite.items():
        assert sorted(pg[table]) == sorted(columns), f"columns of {table} differ"
        for column, declared in columns.items():
            assert pg[table][column] in SAME_TYPE[declared], (
                f"{table}.{column} is {declared} on SQLite but {pg[table][column]} on PostgreSQL"
            )
    assert pg_indexes == lite_indexes


def test_both_dialects_have_the_same_migration_versions() -> None:
    lite = [(version, name) for version, name, _ in migrations("sqlite")]
    pg = [(version, name) for version, name, _ in migrations("postgres")]
    assert lite and pg == lite


# Queries only PostgreSQL can express, each with the way SQLite does the same.
ONLY_POSTGRES_DEFINES = {
    "start_bare_run": "three tables in one statement (data-modifying WITH): SQLite's start takes three",
}


def test_both_dialects_define_the_same_queries() -> None:
    lite, pg = load_queries("sqlite"), load_queries("postgres")
    assert "claim_runs" in lite
    assert sorted(set(lite) - set(pg)) == [], "queries only SQLite defines"
    assert sorted(set(pg) - set(lite) - set(ONLY_POSTGRES_DEFINES)) == [], "queries only PostgreSQL defines"
    assert set(ONLY_POSTGRES_DEFINES) <= set(pg) - set(lite)


def _sqlite_params(sql: str) -> set[str]:
    return set(re.findall(r"(?<![:\w]):([a-z_][a-z0-9_]*)", sql))


def _postgres_params(sql: str) -> set[str]:
    return set(re.findall(r"%\(([a-z_][a-z0-9_]*)\)s", sql))


# Parameters one dialect has no use for (the same dict reaches both; a dialect may ignore a key).
ONLY_POSTGRES_USES = {"lock_key": {"lock"}}  # SQLite has one writer: nothing to lock


def test_each_query_takes_the_same_parameters_in_both_dialects() -> None:
    lite, pg = load_queries("sqlite"), load_queries("postgres")
    differing = {
        name: (sorted(_sqlite_params(lite[name])), sorted(_postgres_params(pg[name])))
        for name in sorted(set(lite) & set(pg))
        if _sqlite_params(lite[name]) | ONLY_POSTGRES_USES.get(name, set()) != _postgres_params(pg[name])
    }
    assert differing == {}
    assert _postgres_params(pg["claim_runs"]) >= {"owner", "now", "keys", "patches"}


def test_postgres_queries_have_no_stray_percent_signs() -> None:
    """psycopg reads ``%`` as a placeholder: a literal one must be written ``%%``."""
    for name, sql in load_queries("postgres").items():
        stray = re.sub(r"%\([a-z0-9_]+\)s|%%", "", sql)
        assert "%" not in stray, f"query {name} has a bare %"


def referenced_queries() -> dict[str, set[str]]:
    """Every query name the code runs by name (``tx.execute("name"``, ``tx.one(``, ``tx.expect(``, ...), by file."""
    pattern = re.compile(r"\.(?:execute(?:_many|_values)?|insert|one|scalar|expect)\(\s*[\"']([a-z0-9_]+)[\"']")
    found: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for name in pattern.findall(path.read_text()):
            found.setdefault(name, set()).add(str(path.relative_to(SRC)))
    return found


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_every_query_the_code_names_exists(dialect: str) -> None:
    used = referenced_queries()
    assert {"get_run", "claim_runs", "upsert_journal"} <= set(used)
    defined = set(load_queries(dialect)) | (set(ONLY_POSTGRES_DEFINES) if dialect == "sqlite" else set())
    missing = {name: sorted(files) for name, files in used.items() if name not in defined}
    assert missing == {}, f"queries named in code but not defined for {dialect}"


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request)


async def test_every_postgres_query_compiles_against_the_schema(pg_url: str) -> None:
    """The server parses and plans each query (unknown columns, untyped parameters...) without running it."""
    import psycopg

    failures = {}
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        for name, sql in load_queries("postgres").items():
            numbers: dict[str, int] = {}

            def number(match: re.Match[str], numbers: dict[str, int] = numbers) -> str:
                return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

            statement = re.sub(r"%\(([a-z0-9_]+)\)s", number, sql).replace("%%", "%")
            try:
                await conn.execute(f"PREPARE lockgate_probe AS {statement}")
                await conn.execute("DEALLOCATE lockgate_probe")
            except psycopg.Error as exc:
                failures[name] = str(exc).splitlines()[0]
    assert failures == {}


async def test_every_sqlite_query_compiles_against_the_schema(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'compile.db'}")
    await store.open()
    await store.close()
    conn = sqlite3.connect(tmp_path / "compile.db")
    failures = {}
    try:
        for name, sql in load_queries("sqlite").items():
            try:
                conn.execute(f"EXPLAIN {sql}", dict.fromkeys(_sqlite_params(sql)))
            except sqlite3.Error as exc:
                failures[name] = str(exc)
    finally:
        conn.close()
    assert failures == {}
