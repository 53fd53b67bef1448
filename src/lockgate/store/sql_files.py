"""Named SQL: each ``.sql`` file holds queries under ``-- name: <name>`` headers."""

from __future__ import annotations

import functools
import re
from importlib import resources

__all__ = ["load_queries", "migrations", "repeatable_queries", "silent_queries", "unprepared_queries"]

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
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"{dialect} migrations are not numbered 1..n without gaps: {versions}")
    return found
