"""Store operations on approval tokens (``ctx.create_token``, ``engine/callbacks.py``).

A token's row is found by the SHA-256 of its secret (or, for an operator, by its id). A
completion checks the row, marks it used and sends the run a message of kind ``token`` named
after the token's id, in one transaction: the update is conditional on the row still being
pending, so of two completions of a single-use token exactly one writes anything.
"""

from __future__ import annotations

from typing import Any

from ..callbacks import TokenExpired, TokenGone, TokenUsed, UnknownToken
from .base import Row, Tx
from .shared import LIVE, add_event, get_run

__all__ = ["complete_token", "find_token", "insert_token", "refusal", "run_tokens"]


async def insert_token(tx: Tx, row: dict[str, Any]) -> None:
    """Store a new token (its hash, never its secret); a body re-entered before its journal entry
    committed makes a new one under the same step, which replaces the first."""
    await tx.execute("insert_callback_token", row)


async def find_token(tx: Tx, token_hash: str | None, token_id: str | None = None) -> Row | None:
    """The token with that hash (or id), with its run's workflow, status and payload (to tell a sealed run)."""
    if token_hash is not None:
        return await tx.one("callback_token_by_hash", {"hash": token_hash})
    return await tx.one("callback_token_by_id", {"id": token_id})


def refusal(row: Row | None, now: float) -> Exception | None:
    """Why the token ``row`` (as ``find_token`` reads it) cannot be completed at ``now``, if it cannot."""
    if row is None:
        return UnknownToken()
    if row["expires_at"] is not None and float(row["expires_at"]) <= now:
        return TokenExpired(row["name"], row["id"])
    if row["status"] != "pending":
        return TokenUsed(row["name"])
    if row["run_status"] not in LIVE:
        return TokenGone(f"callback token {row['name']!r}: its run ended ({row['run_status']})")
    return None


async def complete_token(
    tx: Tx, token_hash: str | None, token_id: str | None, message: dict[str, Any], now: float
) -> Row:
    """Complete the token: mark it used, send ``message`` (``id``, ``payload``) to its run, wake the run.

    ``UnknownToken``, ``TokenExpired``, ``TokenUsed`` or ``TokenGone`` when it cannot be (nothing written).
    """
    row = await find_token(tx, token_hash, token_id)
    refused = refusal(row, now)
    if refused is not None:
        raise refused
    assert row is not None
    run = await get_run(tx, row["run_id"], lock=True)  # a park of the run meanwhile waits for this, then finds it
    if run["status"] not in LIVE:
        raise TokenGone(f"callback token {row['name']!r}: its run ended ({run['status']})")
    if not await tx.execute("use_callback_token", {"id": row["id"], "now": now}):
        raise TokenUsed(row["name"])  # a concurrent completion won: this one changes nothing
    params = {**message, "run_id": row["run_id"], "kind": "token", "name": row["id"], "now": now}
    await tx.execute("insert_message", params)
    data = {"name": row["name"], "token_id": row["id"], "message_id": message["id"]}
    await add_event(tx, row["run_id"], "token-completed", now, data)
    await tx.execute("wake_token_waiter", {"run_id": row["run_id"], "now": now})
    return row


async def run_tokens(tx: Tx, run_id: str) -> list[Row]:
    """The tokens ``run_id`` made, oldest first (no secret is stored to be listed)."""
    return await tx.execute("run_callback_tokens", {"run_id": run_id})
