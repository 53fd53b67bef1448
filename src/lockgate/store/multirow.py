"""One-row ``INSERT ... VALUES (...)`` queries rewritten to carry many rows per statement.

Sending a burst of rows as one statement saves the per-statement work (a round trip on
PostgreSQL; parsing, binding and the virtual machine's start on SQLite) that otherwise
dominates small inserts. Statement sizes are powers of two, so a handful of distinct
statements (each prepared once, then cached) serve any number of rows.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["POSTGRES_PARAM", "MultiRow", "multirow"]

POSTGRES_PARAM = re.compile(r"%\(([A-Za-z_][A-Za-z0-9_]*)\)s")
"""A named parameter in a PostgreSQL query file (psycopg's ``%(name)s``)."""

# Per dialect: how a named parameter is written, its positional placeholder ("$" numbers them), the most
# parameters a statement takes. PostgreSQL statements are written in the server's own numbered form, to be
# sent as they are (psycopg's raw cursor): the driver would otherwise parse the whole long text on every run.
_DIALECTS = {
    "sqlite": (re.compile(r":([A-Za-z_][A-Za-z0-9_]*)"), "?", 32766),
    "postgres": (POSTGRES_PARAM, "$", 65535),
}
_LARGEST = 256  # rows per statement at most: beyond this the statement text costs more than it saves


class MultiRow:
    """The named query ``name`` (one ``VALUES`` group of named parameters) for any number of rows."""

    def __init__(self, name: str, sql: str, *, dialect: str) -> None:
        param, self._placeholder, most_params = _DIALECTS[dialect]
        at = re.search(r"\bVALUES\s*\(", sql, re.IGNORECASE)
        if at is None:
            raise ValueError(f"query {name!r} has no VALUES (...) group to repeat")
        depth, end = 0, at.end() - 1
        for end in range(at.end() - 1, len(sql)):
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            if depth == 0:
                break
        group = sql[at.end() - 1 : end + 1]
        if param.search(sql[: at.start()]) or param.search(sql[end + 1 :]):
            raise ValueError(f"query {name!r} has parameters outside its VALUES group")
        self.names: list[str] = param.findall(group)
        self._literals: list[str] = param.split(group)[::2]  # the group's text around its parameters
        self._head = sql[: at.end() - 1]
        self._tail = sql[end + 1 :].rstrip().rstrip(";")
        if self._placeholder == "$":  # sent as is: the driver's escape for a literal % is not undone
            self._head, self._tail = self._head.replace("%%", "%"), self._tail.replace("%%", "%")
            self._literals = [part.replace("%%", "%") for part in self._literals]
        most = max(1, min(_LARGEST, most_params // max(1, len(self.names))))
        self._largest = 1 << (most.bit_length() - 1)
        self._sql: dict[int, str] = {}

    def statements(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
        """``rows`` as statements of power-of-two sizes, each with its positional parameters."""
        out = []
        start, n = 0, len(rows)
        names = self.names
        while start < n:
            left = n - start
            size = min(self._largest, 1 << (left.bit_length() - 1))
            chunk = rows[start : start + size]
            start += size
            out.append((self._text(size), [row[k] for row in chunk for k in names]))
        return out

    def _text(self, size: int) -> str:
        text = self._sql.get(size)
        if text is None:
            text = self._sql[size] = self._head + ",".join(self._groups(size)) + self._tail
        return text

    def _groups(self, size: int) -> list[str]:
        literals, width = self._literals, len(self.names)
        if self._placeholder != "$":
            group = self._placeholder.join(literals)
            return [group] * size
        groups = []
        for row in range(size):
            parts = [literals[0]]
            for i, literal in enumerate(literals[1:]):
                parts += (f"${row * width + i + 1}", literal)
            groups.append("".join(parts))
        return groups


@functools.cache
def multirow(name: str, sql: str, dialect: str) -> MultiRow:
    """The many-row form of the named query ``name``, built once."""
    return MultiRow(name, sql, dialect=dialect)
