"""Store operations for a read store: who a server is, and how far a standby lags its primary.

A read store is a streaming standby of the write store (PostgreSQL): ``server`` tells a
standby (in recovery, its primary's system identifier) from a primary; ``replay`` reads on
the standby how far it has replayed, ``behind`` on the primary how much WAL lies past that.
``inspect/standby.py`` judges and combines the answers.
"""

from __future__ import annotations

from typing import Any

from .base import Tx

__all__ = ["behind", "replay", "server"]


async def server(tx: Tx) -> dict[str, Any]:
    """``in_recovery``, ``system_id`` (``None`` on SQLite), ``database_name`` and ``schema_name``."""
    row = (await tx.execute("standby_server"))[0]
    return {
        "in_recovery": bool(row["in_recovery"]),
        "system_id": None if row["system_id"] is None else str(row["system_id"]),
        "database_name": str(row["database_name"]),
        "schema_name": None if row["schema_name"] is None else str(row["schema_name"]),
    }


async def replay(tx: Tx) -> dict[str, Any]:
    """On a standby: ``replay_lsn`` (text), ``replayed_at`` (epoch seconds of the last transaction
    replayed's commit, ``None`` before any) and ``now`` (the standby's clock)."""
    row = (await tx.execute("standby_replay"))[0]
    return {
        "replay_lsn": row["replay_lsn"],
        "replayed_at": None if row["replayed_at"] is None else float(row["replayed_at"]),
        "now": float(row["now"]),
    }


async def behind(tx: Tx, replay_lsn: str) -> dict[str, Any]:
    """On the primary: ``primary_lsn`` (text) and ``behind``, the WAL bytes past ``replay_lsn``."""
    row = (await tx.execute("standby_behind", {"replay_lsn": replay_lsn}))[0]
    return {"primary_lsn": row["primary_lsn"], "behind": int(row["behind"] or 0)}
