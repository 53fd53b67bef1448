"""Listing runs: the filters every surface offers, pages continued by a cursor, and text search.

``RunFilter`` says which runs a listing holds; ``runs_page`` reads one page of them newest
first (``created_at``, then id, descending). A page ends with ``next_cursor``, the position of
its last run: the next page starts below it, so pages neither repeat nor skip a run while new
ones are added (those are newer: they appear on a fresh first page, never further down).

Text search (``text``) reads the runs the other filters keep, newest first, and matches the
text in each one's payload and error as a reader sees them: values sealed for an encrypted
workflow are opened with the keyring the caller holds, and a value no key opens is not
searched (it never matches, so a match tells nothing about what it hides). The search reads at
most ``TEXT_WINDOW`` runs per page; when that window ends first, the page holds the matches
found so far and its cursor continues the search below the last run read.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from ..crypto import ENCRYPTED, Keyring, reveal_row
from ..errors import InvalidArgument
from ..records import RunInfo
from ..store import shared
from ..store.base import Row, Tx
from ..store.listing import FOREVER, RunSlice, page_of_runs

__all__ = [
    "RUN_STATUSES",
    "TEXT_WINDOW",
    "RunFilter",
    "RunPage",
    "decode_cursor",
    "encode_cursor",
    "runs_page",
    "split_statuses",
]

TEXT_WINDOW = 5000
"""The most runs one page of a text search reads (the other filters narrow them first)."""

_CHUNK = 500  # runs read per query while searching text

RUN_STATUSES = ("running", "suspended", "succeeded", "failed", "cancelled")
"""Every status a run can have, in the order tables show them."""
_NO_KEYS = Keyring()  # opens nothing: sealed values show as ``<encrypted>``


@dataclass(frozen=True)
class RunFilter:
    """Which runs a listing holds: every field that is set must match (``None`` or empty: any).

    ``statuses``: any of these; ``since``/``until``: created at or after / before (aware
    datetimes); ``id_prefix``: the run id starts with it; ``text``: found (case-insensitively)
    in the payload, the error tag or the error message; ``dead_letter``: failed runs nobody has
    discarded; ``source``: started from there (``api``, ``cli``, ``event:<name>``, ...).
    """

    workflow: str | None = None
    statuses: tuple[str, ...] = ()
    source: str | None = None
    parent_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    id_prefix: str | None = None
    text: str | None = None
    dead_letter: bool = False

    def check(self) -> RunFilter:
        """This filter, or ``InvalidArgument`` naming the field no run could match."""
        for status in self.statuses:
            if status not in RUN_STATUSES:
                raise InvalidArgument(f"unknown status {status!r}: {', '.join(RUN_STATUSES)}")
        if self.dead_letter and any(s != "failed" for s in self.statuses):
            raise InvalidArgument("dead letters are failed runs; they cannot be combined with another status")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise InvalidArgument(f"{name} must be a timezone-aware datetime")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise InvalidArgument("since must be before until")
        for name in ("workflow", "source", "parent_id", "id_prefix", "text"):
            if getattr(self, name) == "":
                raise InvalidArgument(f"{name} must not be empty (leave it out to match any)")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RunPage:
    """One page of runs, newest first; ``next_cursor`` continues below the last one (``None``: no more).

    ``searched`` is how many runs a text search read for this page (0 without ``text``).
    """

    items: list[RunInfo] = field(default_factory=list)
    next_cursor: str | None = None
    searched: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"items": [r.to_dict() for r in self.items], "next_cursor": self.next_cursor, "searched": self.searched}


def split_statuses(*values: str) -> tuple[str, ...]:
    """Statuses given as text, each value one or several comma-separated (``"failed,cancelled"``)."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


Position = tuple[float, str]  # (created_at, id) of the run a page continues below


def encode_cursor(position: Position) -> str:
    """An opaque cursor for the page below ``position``."""
    at, run_id = position
    return base64.urlsafe_b64encode(f"{at!r} {run_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """The position ``cursor`` names (``InvalidArgument`` if it is not a cursor a page gave)."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, run_id = text.split(" ", 1)
        return float(at), run_id
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidArgument(f"cursor {cursor!r} is not one a page of runs gave") from None


def _position(row: Row) -> Position:
    return float(row["created_at"]), str(row["id"])


async def runs_page(
    tx: Tx,
    where: RunFilter,
    *,
    cursor: str | None = None,
    before: str | None = None,
    limit: int = 50,
    offset: int = 0,
    keyring: Keyring | None = None,
) -> RunPage:
    """Up to ``limit`` runs in ``where`` below ``cursor`` (or below the run ``before``), skipping ``offset``.

    ``UnknownRun`` if ``before`` names no run. Sealed values show in clear where ``keyring``
    opens them, ``<encrypted>`` elsewhere.
    """
    where.check()
    if limit < 1 or offset < 0:
        raise InvalidArgument("limit must be >= 1 and offset >= 0")
    if cursor is not None and before is not None:
        raise InvalidArgument("give cursor or before, not both")
    keys = keyring or _NO_KEYS
    position: Position | None = None
    if cursor is not None:
        position = decode_cursor(cursor)
    elif before is not None:
        position = _position(await shared.get_run(tx, before))
    if where.text is None:
        rows = await _rows(tx, where, position, limit + offset + 1)
        kept = rows[offset:]
        page = kept[:limit]
        more = len(kept) > limit
        return RunPage(
            items=[RunInfo.from_row(reveal_row(keys, r)) for r in page],
            next_cursor=encode_cursor(_position(page[-1])) if more and page else None,
        )
    return await _search(tx, where, position, limit, offset, keys)


async def _search(
    tx: Tx, where: RunFilter, position: Position | None, limit: int, offset: int, keys: Keyring
) -> RunPage:
    needle = (where.text or "").casefold()
    found: list[RunInfo] = []
    skipped = searched = 0
    last: Position | None = position
    while searched < TEXT_WINDOW:
        want = min(_CHUNK, TEXT_WINDOW - searched)
        chunk = await _rows(tx, where, last, want)
        for row in chunk:
            searched += 1
            last = _position(row)
            shown = reveal_row(keys, row)
            if not _mentions(row, shown, needle):
                continue
            if skipped < offset:
                skipped += 1
                continue
            found.append(RunInfo.from_row(shown))
            if len(found) > limit:
                return RunPage(found[:limit], encode_cursor(_at(found[limit - 1])), searched)
        if len(chunk) < want:
            return RunPage(found, None, searched)  # every run the other filters keep was read
    # the window ended first: the cursor continues the search below the last run read
    return RunPage(found, None if last is None else encode_cursor(last), searched)


def _at(run: RunInfo) -> Position:
    return _position(run.raw)


def _mentions(stored: Row, shown: Row, needle: str) -> bool:
    """Whether ``needle`` is in the run's payload or error as a reader sees them.

    A value still sealed (no key opened it) is not searched: its stand-in must not match.
    """
    for column in ("payload", "error_tag", "error_message"):
        text = shown.get(column)
        if not isinstance(text, str):
            continue
        if ENCRYPTED in text and "$sealed" in (stored.get(column) or ""):
            continue
        if needle in text.casefold():
            return True
    return False


async def _rows(tx: Tx, where: RunFilter, position: Position | None, limit: int) -> list[Row]:
    """Up to ``limit`` stored rows in ``where`` (text aside) below ``position``, newest first."""
    upper: Position = (FOREVER, "\U0010ffff")
    if where.until is not None:
        upper = (where.until.timestamp(), "")  # "" keeps out the runs created at ``until``
    if position is not None:
        upper = min(upper, position)
    base = RunSlice(
        workflow=where.workflow,
        parent_id=where.parent_id,
        source=where.source,
        id_prefix=where.id_prefix,
        dead_letter=where.dead_letter,
        lower_at=-FOREVER if where.since is None else where.since.timestamp(),
        upper_at=upper[0],
        upper_id=upper[1],
    )
    statuses: tuple[str | None, ...] = where.statuses or (("failed",) if where.dead_letter else (None,))
    if len(statuses) == 1:
        return await page_of_runs(tx, replace(base, status=statuses[0]), limit)
    rows: list[Row] = []
    for status in dict.fromkeys(statuses):  # each status by its own index, then merged
        rows += await page_of_runs(tx, replace(base, status=status), limit)
    rows.sort(key=_position, reverse=True)
    return rows[:limit]
