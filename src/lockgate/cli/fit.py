"""``FitTable``: a rich table that fits the terminal it is printed to, readable at 80 columns.

Rich squeezes every column alike when a table is too wide, down to nothing: ids, statuses and
workflow names become ``…``. A ``FitTable`` instead keeps the columns that identify a row whole
(its first column and those named in ``keep``), lets the others wrap down to a floor,
and when even that does not fit, leaves out whole columns from the right, saying which in its
caption. The columns named in ``drop`` go first, in that order, before anything is wrapped.
JSON output always has every field.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Column, Table
from rich.text import Text

__all__ = ["WRAP_FLOOR", "FitTable"]

WRAP_FLOOR = 10  # a wrapped column narrower than this reads as noise


class FitTable(Table):
    """A ``Table`` that lays itself out for the width it is given (see the module's docstring)."""

    def __init__(self, *headers: Any, keep: Iterable[str] = (), drop: Iterable[str] = (), **kwargs: Any) -> None:
        super().__init__(*headers, **kwargs)
        self._keep = frozenset(keep)
        self._drop = tuple(drop)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        fitted = copy.deepcopy(self)  # each print fits anew, whatever the width before
        fitted._fit(options.max_width)
        yield from super(FitTable, fitted).__rich_console__(console, options)

    def _fit(self, width: int) -> None:
        if not self.columns:
            return
        natural = {id(c): _natural(c) for c in self.columns}
        if self._total(natural, lambda c: natural[id(c)]) <= width:
            return  # fits as it is: rich lays it out
        keep = [c for i, c in enumerate(self.columns) if i == 0 or _plain(c.header) in self._keep]

        def floor(column: Column) -> int:
            return natural[id(column)] if column in keep else min(natural[id(column)], WRAP_FLOOR)

        left_out: list[str] = []
        for header in self._drop:  # first what the table names as the first to go, before anything wraps
            if self._total(natural, lambda c: natural[id(c)]) <= width:
                break
            for column in [c for c in self.columns if _plain(c.header) == header and c not in keep]:
                left_out.append(header)
                self.columns.remove(column)
        while self._total(natural, floor) > width:
            victim = self._victim(keep)
            if victim is None:
                break  # only identifying columns remain: wider than the terminal, never cut
            left_out.append(_plain(victim.header))
            self.columns.remove(victim)
        for index, column in enumerate(self.columns):
            column._index = index
        spare = width - self._total(natural, floor)
        for column in self.columns:
            column.width = floor(column)
            if column in keep:
                column.no_wrap = True
            else:
                column.no_wrap = False
                column.overflow = "fold"
        # share what is left, the smallest needs first: a timestamp whole before a long error is widened
        wrapped = sorted((c for c in self.columns if c not in keep), key=lambda c: natural[id(c)] - floor(c))
        for left, column in enumerate(wrapped):
            give = min(natural[id(column)] - floor(column), max(spare, 0) // (len(wrapped) - left))
            column.width = floor(column) + give
            spare -= give
        if left_out:
            note = f"left out at this width: {', '.join(left_out)} (--format json has them)"
            self.caption = note if self.caption is None else f"{self.caption}; {note}"
            self.caption_justify = "left"

    def _total(self, natural: dict[int, int], width_of: Callable[[Column], int]) -> int:
        pads = sum(self._get_padding_width(i) for i in range(len(self.columns)))
        return sum(width_of(c) for c in self.columns) + pads + int(self._extra_width)

    def _victim(self, keep: list[Column]) -> Column | None:
        rest = [c for c in self.columns if c not in keep]
        return rest[-1] if rest else None


def _plain(renderable: Any) -> str:
    return renderable.plain if isinstance(renderable, Text) else str(renderable)


def _lines(renderable: Any) -> Iterator[str]:
    yield from (_plain(renderable) if isinstance(renderable, str | Text) else " " * WRAP_FLOOR).splitlines() or [""]


def _natural(column: Column) -> int:
    """The width ``column`` takes unwrapped: its widest cell or its header's widest word."""
    header = max((cell_len(word) for line in _lines(column.header) for word in line.split()), default=0)
    cells = max((cell_len(line) for cell in column.cells for line in _lines(cell)), default=0)
    return max(header, cells, 1)
