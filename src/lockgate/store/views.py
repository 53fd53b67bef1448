"""Store operations for the dashboard's saved views: a name and the query string of its filters."""

from __future__ import annotations

from .base import Row, Tx

__all__ = ["delete_view", "get_view", "list_views", "save_view"]


async def save_view(tx: Tx, name: str, query: str, now: float) -> None:
    """Create or replace the view ``name``."""
    await tx.execute("save_view", {"name": name, "query": query, "now": now})


async def list_views(tx: Tx, limit: int) -> list[Row]:
    """Saved views by name."""
    return await tx.execute("list_saved_views", {"limit": limit})


async def get_view(tx: Tx, name: str) -> Row | None:
    return await tx.one("get_saved_view", {"name": name})


async def delete_view(tx: Tx, name: str) -> bool:
    """Forget the view ``name``; whether there was one."""
    return bool(await tx.execute("delete_saved_view", {"name": name}))
