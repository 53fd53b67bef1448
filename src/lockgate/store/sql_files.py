"""Named SQL: each ``.sql`` file holds queries under ``-- name: <name>`` headers."""

from __future__ import annotations

import functools
import re
from importlib import resources

from ..errors import StoreError

__all__ = [
    "check_schema",
    "load_queries",
    "migrations",
    "refuse_newer",
    "repeatable_queries",
    "schema_version",
    "silent_queries",
    "unprepared_queries",
]

_HEADER = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*$", re.MULTILINE)
_REPEATABLE = re.compile(r"^--\s*repeatable:", re.MULTILINE)
_SILENT = re.compile(r"^--\s*silent:", re.MULTILINE)
_UNPREPARED = re.compile(r"^--\s*unprepared:", re.MULTILINE)


@functools.cache
def _sections(dialect: str) -> dict[str, str]:
    """Each named query's text under its header, comments included."""
    sections: dict[str, str] = {}
    folder = resources.files("lockgate.store") / "sql" / dialect
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        parts = _HEADER.split(entry.read_text())
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in sections:
                raise RuntimeError(f"query {name!r} is defined twice for {dialect}")
            sections[name] = body
    return sections


@functools.cache
def load_queries(dialect: str) -> dict[str, str]:
    """Every named query of ``dialect``, read once."""
    queries: dict[str, str] = {}
    for name, body in _sections(dialect).items():
        # Whole-line comments document the file; the query text the stores send and inspect is SQL alone.
        sql = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))
        queries[name] = sql.strip().rstrip(";")
    return queries


@functools.cache
def repeatable_queries(dialect: str) -> frozenset[str]:
    """The queries marked ``-- repeatable: <why>``: run twice with the same parameters, they leave what once does.

    A store may run such a write again when it cannot learn whether the first run committed.
    """
    return frozenset(name for name, body in _sections(dialect).items() if _REPEATABLE.search(body))


@functools.cache
def silent_queries(dialect: str) -> frozenset[str]:
    """The queries marked ``-- silent: <why>``: run for their effect alone, though they return rows.

    Nobody reads those rows, so a store may send such a query without waiting for its answer.
    """
    return frozenset(name for name, body in _sections(dialect).items() if _SILENT.search(body))


@functools.cache
def unprepared_queries(dialect: str) -> frozenset[str]:
    """The queries marked ``-- unprepared: <why>``: planned for the values of each run, never from a plan
    kept for the statement (whose guess at unknown values would pick the wrong index)."""
    return frozenset(name for name, body in _sections(dialect).items() if _UNPREPARED.search(body))


def migrations(dialect: str) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` of each migration file of ``dialect``, in order."""
    folder = resources.files("lockgate.store") / "migrations" / dialect
    found = []
    for entry in folder.iterdir():
        match = re.match(r"^(\d{4})_([a-z0-9_]+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text()))
    found.sort()
    versions = [v for v, _, _ in found]
    # Numbers are handed out ahead of time to changes landing in any order: a gap is allowed
    # (each version applies once, whenever it arrives), a number used twice is not.
    if len(set(versions)) != len(versions) or (versions and versions[0] != 1):
        raise RuntimeError(f"{dialect} migrations must start at 1 and use each number once: {versions}")
    return found


def check_schema(dialect: str, applied: set[int] | None, where: str, url: str) -> None:
    """Refuse a database whose lockgate schema is not this version's (``applied``: its migration
    versions; ``None``: it has no lockgate tables). Where nothing may be migrated, this is the check."""
    how = f"run 'lockgate migrate --store {url}'"
    if applied is None:
        raise StoreError(f"no lockgate database at {where} ({how} to create one)")
    refuse_newer(dialect, applied, where)
    known = {version for version, _, _ in migrations(dialect)}
    latest = schema_version(dialect)
    missing = sorted(known - applied)
    if missing:
        raise StoreError(
            f"the lockgate database at {where} is missing migration(s) {_listed(missing)} of this lockgate's "
            f"schema (version {latest}): {how}"
        )


def refuse_newer(dialect: str, applied: set[int], where: str) -> None:
    """Refuse a database that holds migrations this code does not know (a newer lockgate made them):
    neither migrating nor writing to it is safe, whatever the mode a store opens in."""
    unknown = sorted(applied - {version for version, _, _ in migrations(dialect)})
    if unknown:
        raise StoreError(
            f"the lockgate database at {where} is at schema version {max(applied)}: it holds migration(s) "
            f"{_listed(unknown)} that this lockgate (schema version {schema_version(dialect)}) does not know: "
            "upgrade lockgate"
        )


def schema_version(dialect: str) -> int:
    """This code's schema version: its newest migration's number (numbers may have gaps)."""
    return max(version for version, _, _ in migrations(dialect))


def _listed(versions: list[int]) -> str:
    return ", ".join(f"{v:04d}" for v in versions)
