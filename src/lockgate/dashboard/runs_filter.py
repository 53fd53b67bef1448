"""The runs list's filters, read from and written back to the URL, and the page they ask for.

``RunFilter`` is what a link carries (``?workflow=charge&status=failed&q=card``); ``fetch_runs``
hands every one of them to ``Inspector.runs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from ..errors import InvalidArgument
from ..inspect import Inspector, split_statuses
from ..inspect import RunFilter as Listing
from ..records import RunInfo

__all__ = ["RunFilter", "RunsPage", "fetch_runs"]

_MAX_LIMIT = 500


@dataclass(frozen=True)
class RunFilter:
    """The runs list's filters, as in its URL (empty fields are left out of the URL)."""

    workflow: str = ""
    status: str = ""
    source: str = ""
    since: str = ""  # an ISO date or time (UTC when no offset is given)
    until: str = ""
    q: str = ""  # text searched in the id, payload, output and error
    id_prefix: str = ""  # runs whose id starts with this
    dead_letter: bool = False
    before: str = ""  # the last run id of the previous page
    limit: int = 50

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> RunFilter:
        """The filters of a query string; ``InvalidArgument`` naming a bad one."""
        raw = {f.name: query.get(f.name, "").strip() for f in fields(cls)}
        limit = raw.pop("limit") or "50"
        if not limit.isdigit() or not 1 <= int(limit) <= _MAX_LIMIT:
            raise InvalidArgument(f"limit must be a number from 1 to {_MAX_LIMIT}")
        dead = raw.pop("dead_letter").lower() in ("1", "true", "on", "yes")
        found = cls(**raw, dead_letter=dead, limit=int(limit))
        Listing(statuses=split_statuses(found.status), dead_letter=dead).check()  # the listing's own rules
        found.since_time()
        found.until_time()
        return found

    def query(self, **changes: Any) -> str:
        """The URL query string of these filters (with ``changes``), without empty fields."""
        values = replace(self, **changes)
        pairs: list[tuple[str, str]] = []
        for f in fields(values):
            value = getattr(values, f.name)
            if f.name == "limit":
                if value != 50:
                    pairs.append((f.name, str(value)))
            elif f.name == "dead_letter":
                if value:
                    pairs.append((f.name, "1"))
            elif value:
                pairs.append((f.name, value))
        return urlencode(pairs)

    @property
    def active(self) -> bool:
        """Any filter is set (the cursor and page size aside)."""
        return bool(self.query(before="", limit=50))

    def since_time(self) -> datetime | None:
        return _time(self.since, "since")

    def until_time(self) -> datetime | None:
        return _time(self.until, "until")


def _time(text: str, name: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"{name} must be an ISO date or time, like 2026-12-04T09:30, got {text!r}") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class RunsPage:
    """A page of runs; ``next_before`` continues it."""

    items: list[RunInfo]
    next_before: str | None


async def fetch_runs(inspector: Inspector, wanted: RunFilter) -> RunsPage:
    """The page of runs ``wanted`` describes, newest first: every filter is the Inspector's own."""
    items = await inspector.runs(
        workflow=wanted.workflow or None,
        statuses=split_statuses(wanted.status),
        source=wanted.source or None,
        since=wanted.since_time(),
        until=wanted.until_time(),
        id_prefix=wanted.id_prefix or None,
        text=wanted.q or None,
        dead_letter=wanted.dead_letter,
        before=wanted.before or None,
        limit=wanted.limit,
    )
    return RunsPage(items, items[-1].id if len(items) == wanted.limit else None)
