"""Saved views of the runs list: named query strings kept in the store, shared by every operator.

The dashboard saves its filters under a name and opens them again by that name; the view is
the URL query string alone, so what it shows is what the same link would show.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from ..clock import to_datetime
from ..errors import InvalidArgument
from ..store import Store
from ..store import views as store_views
from ..store.base import Row

__all__ = ["MAX_VIEWS", "SavedView", "delete_view", "list_views", "save_view"]

MAX_VIEWS = 500
MAX_NAME = 100
MAX_QUERY = 2000


@dataclass(frozen=True)
class SavedView:
    """A named set of runs-list filters (``query``: the URL query string, ``workflow=a&status=failed``)."""

    name: str
    query: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Row) -> SavedView:
        created = to_datetime(float(row["created_at"]))
        updated = to_datetime(float(row["updated_at"]))
        assert created is not None and updated is not None
        return cls(name=row["name"], query=row["query"], created_at=created, updated_at=updated)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["created_at"] = self.created_at.isoformat()
        out["updated_at"] = self.updated_at.isoformat()
        return out


def _check(name: str, query: str | None = None) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise InvalidArgument(f"name must be 1 to {MAX_NAME} characters")
    if query is not None and len(query) > MAX_QUERY:
        raise InvalidArgument(f"query must be at most {MAX_QUERY} characters")
    return name


async def list_views(store: Store) -> list[SavedView]:
    """Every saved view, by name."""
    return [SavedView.from_row(r) for r in await store.read(store_views.list_views, MAX_VIEWS)]


async def save_view(store: Store, name: str, query: str, now: float) -> SavedView:
    """Create or replace the view ``name`` (``InvalidArgument`` naming the bad field; nothing written then)."""
    name = _check(name, query)
    await store.write(store_views.save_view, name, query, now)
    row = await store.read(store_views.get_view, name)
    assert row is not None
    return SavedView.from_row(row)


async def delete_view(store: Store, name: str) -> bool:
    """Forget the view ``name``; whether there was one."""
    return await store.write(store_views.delete_view, _check(name))
