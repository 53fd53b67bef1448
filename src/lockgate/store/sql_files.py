"""Named SQL: each ``.sql`` file holds queries under ``-- name: <name>`` headers."""

from __future__ import annotations

import functools
import re
from importlib import resources

__all__ = ["load_queries", "migrations"]

_HEADER = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*$", re.MULTILINE)


@functools.cache
def load_queries(dialect: str) -> dict[str, str]:
    """Every named query of ``dialect``, read once."""
    queries: dict[str, str] = {}
    folder = resources.files("lockgate.store") / "sql" / dialect
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text()
        parts = _HEADER.split(text)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise RuntimeError(f"query {name!r} is defined twice for {dialect}")
            # Whole-line comments document the file; the query text the stores send and inspect is SQL alone.
            sql = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))
            queries[name] = sql.strip().rstrip(";")
    return queries


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
