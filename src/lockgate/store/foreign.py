"""The caller's connection, as its driver holds it: what ``conn=`` may be, unwrapped.

A start or publish made with ``conn=`` is written in the caller's own transaction. The
caller may hand over the driver's connection (psycopg 3, ``sqlite3``) or what a web app
usually holds: an SQLAlchemy ``Session`` / ``Connection`` or ``AsyncSession`` /
``AsyncConnection`` (the ``lockgate[sqlalchemy]`` extra). Those are unwrapped through
SQLAlchemy's public API to the driver connection under them, whose transaction is theirs.
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import ForeignTransaction

__all__ = ["describe", "driver_connection"]


async def driver_connection(conn: Any) -> Any:
    """The driver connection under ``conn`` (``conn`` itself when it is one already).

    An SQLAlchemy session begins its transaction here if it has none yet (``connection()``
    autobegins), so the start joins the transaction the session then commits or rolls back.
    """
    module = type(conn).__module__
    if not module.startswith("sqlalchemy."):
        return conn
    if "sqlalchemy" not in sys.modules:  # an object of SQLAlchemy's without SQLAlchemy: nothing to unwrap
        return conn
    # The async wrappers first: their sync counterparts sit under them (``sync_session``, ``sync_connection``).
    if module.startswith("sqlalchemy.ext.asyncio"):
        get_raw = getattr(conn, "get_raw_connection", None)
        if get_raw is None and hasattr(conn, "sync_session"):  # AsyncSession: its AsyncConnection (autobegun)
            conn = await conn.connection()
            get_raw = conn.get_raw_connection
        if get_raw is None:
            raise ForeignTransaction(f"conn= is an SQLAlchemy {type(conn).__name__}, not a session or a connection")
        _in_transaction(conn)
        raw = await get_raw()
        return raw.driver_connection
    connection = getattr(conn, "connection", None)
    if callable(connection):  # Session: its Connection in the session's transaction (autobegun)
        conn = connection()
        connection = conn.connection
    if connection is None or not hasattr(connection, "driver_connection"):
        raise ForeignTransaction(f"conn= is an SQLAlchemy {type(conn).__name__}, not a session or a connection")
    _in_transaction(conn)
    return connection.driver_connection


def _in_transaction(conn: Any) -> None:
    """An SQLAlchemy connection outside ``begin()`` would leave the start uncommitted on the driver: refused."""
    if not conn.in_transaction():
        raise ForeignTransaction(
            "conn= is an SQLAlchemy connection with no transaction begun: start it inside "
            "'with engine.begin() as conn:' (or after a statement has autobegun one), or pass the session"
        )


def describe(conn: Any) -> str:
    """What ``conn`` is, for an error message."""
    kind = type(conn)
    return f"{kind.__module__}.{kind.__qualname__}"
