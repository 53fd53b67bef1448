"""PostgreSQL migrations: the pending ones applied in one transaction, one process at a time."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ...errors import StoreError
from ..sql_files import check_schema, migrations
from .failures import cannot_connect, first_line

__all__ = ["check", "migrate"]

log = logging.getLogger("lockgate.store")
_MIGRATION_LOCK = 0x6C6F636B67617465  # "lockgate": serialises the migrations of processes booting together


async def migrate(conninfo: str, where: str, schema: str | None = None) -> None:
    """Apply pending migrations in one transaction, one process at a time (in ``schema``, created if need be)."""
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, row_factory=dict_row)
    except psycopg.OperationalError as exc:
        raise cannot_connect(where, exc) from None
    try:
        async with conn:
            await _refuse_standby(conn, where)
            async with conn.transaction():
                await _apply(conn, schema)
    except psycopg.Error as exc:
        raise StoreError(f"migrating PostgreSQL at {where} failed: {first_line(exc)}") from exc


async def _refuse_standby(conn: psycopg.AsyncConnection[Any], where: str) -> None:
    """A standby (a server in recovery) given as the store: said at once, not as a failed DDL statement."""
    cursor = await conn.execute("SELECT pg_is_in_recovery() AS standby")
    row = await cursor.fetchone()
    if row is not None and row["standby"]:
        raise StoreError(
            f"PostgreSQL at {where} is a standby (in recovery) and takes no writes: give the primary, "
            "or every host with ?target_session_attrs=read-write"
        )


async def _apply(conn: psycopg.AsyncConnection[Any], schema: str | None) -> None:
    """The pending migrations, in order, under the lock that serialises booting processes."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
    if schema is not None:  # an identifier checked by the store; the connection's search_path names it
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS lockgate_migrations "
        "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
    )
    cursor = await conn.execute("SELECT version FROM lockgate_migrations")
    done = {row["version"] for row in await cursor.fetchall()}
    for version, name, sql in migrations("postgres"):
        if version in done:
            continue
        await conn.execute(sql)  # several statements: sent without parameters
        await conn.execute(
            "INSERT INTO lockgate_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
            (version, name, time.time()),
        )
        log.info("applied postgres migration %04d_%s", version, name)


async def check(conninfo: str, where: str, url: str) -> None:
    """Refuse a database whose lockgate schema is missing or not current; write nothing."""
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, row_factory=dict_row)
    except psycopg.OperationalError as exc:
        raise cannot_connect(where, exc) from None
    try:
        async with conn:
            cursor = await conn.execute("SELECT to_regclass('lockgate_migrations') IS NOT NULL AS present")
            row = await cursor.fetchone()
            applied: set[int] | None = None
            if row is not None and row["present"]:
                cursor = await conn.execute("SELECT version FROM lockgate_migrations")
                applied = {r["version"] for r in await cursor.fetchall()}
    except psycopg.Error as exc:
        raise StoreError(f"reading the schema version of PostgreSQL at {where} failed: {first_line(exc)}") from exc
    check_schema("postgres", applied, where, url)
