"""Store operations on signals and updates sent to runs."""

from __future__ import annotations

from typing import Any

from ..errors import RunNotEligible
from .base import Row, Tx
from .shared import LIVE, add_event, get_run

__all__ = ["get_message", "list_messages", "next_message", "send_message", "settle_message"]


async def send_message(tx: Tx, message: dict[str, Any], now: float) -> Row:
    """Store a signal or update for a live run and wake it if it waits for one.

    The run's row is locked first, so that the send and a park of the run meanwhile never miss each other.
    """
    row = await get_run(tx, message["run_id"], lock=True)
    verb = message["kind"]
    if row["status"] not in LIVE:
        raise RunNotEligible(verb, row["id"], row["status"], f"a finished run takes no {verb}s")
    await tx.execute("insert_message", {**message, "now": now})
    await add_event(
        tx,
        row["id"],
        f"{verb}-{'sent' if verb == 'signal' else 'requested'}",
        now,
        {"name": message["name"], "message_id": message["id"]},
    )
    await tx.execute("wake_run", {"run_id": row["id"], "now": now, "waiting_on": verb})
    return row


async def next_message(tx: Tx, run_id: str, kind: str, name: str) -> Row | None:
    return await tx.one("next_message", {"run_id": run_id, "kind": kind, "name": name})


async def get_message(tx: Tx, message_id: str) -> Row | None:
    return await tx.one("get_message", {"id": message_id})


async def settle_message(
    tx: Tx,
    message_id: str,
    now: float,
    *,
    status: str,
    result: str | None = None,
    error_tag: str | None = None,
    error_message: str | None = None,
    step_key: str | None = None,
) -> bool:
    rows = await tx.execute(
        "settle_message",
        {
            "id": message_id,
            "status": status,
            "result": result,
            "error_tag": error_tag,
            "error_message": error_message,
            "step_key": step_key,
            "now": now,
        },
    )
    return bool(rows)


async def list_messages(tx: Tx, run_id: str) -> list[Row]:
    return await tx.execute("list_messages", {"run_id": run_id})
