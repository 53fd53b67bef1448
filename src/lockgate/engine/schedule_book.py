"""Which ``ScheduleDef`` a stored schedule row stands for: its code's, or its own options'.

A declared schedule's definition is the one this process's code validated at boot; a runtime
schedule's is read from its row (``schedule_options.from_row``) and kept here by revision, so
a sweep that meets the same schedule tick after tick parses its options once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

from ..schedule import ScheduleDef
from ..schedule_options import from_row
from ..store import Store
from ..store import schedules as sched_ops
from ..store.base import Row

__all__ = ["ScheduleBook"]


class ScheduleBook:
    """Definitions of stored schedules: declared ones from ``declared``, runtime ones from their rows."""

    def __init__(self, declared: Mapping[str, ScheduleDef], size: int = 20_000) -> None:
        self.declared = declared
        self._size = size
        self._runtime: OrderedDict[str, tuple[int, ScheduleDef]] = OrderedDict()

    def of_row(self, row: Row) -> ScheduleDef | None:
        """The definition of the schedule whose row is ``row``; ``None`` for one this code does not declare."""
        name = row["name"]
        if row["origin"] != "runtime":
            return self.declared.get(name)
        revision = int(row["revision"])
        known = self._runtime.get(name)
        if known is not None and known[0] == revision:
            self._runtime.move_to_end(name)
            return known[1]
        defn, _ = from_row(row)
        self._runtime[name] = (revision, defn)
        if len(self._runtime) > self._size:
            self._runtime.popitem(last=False)
        return defn

    async def named(self, store: Store, names: Iterable[str]) -> dict[str, ScheduleDef]:
        """The definitions of ``names`` that exist (declared here, or stored as runtime schedules)."""
        wanted = set(names)
        out = {n: self.declared[n] for n in wanted if n in self.declared}
        rest = sorted(wanted - set(out))
        for row in await store.read(sched_ops.schedules_named, rest) if rest else []:
            defn = self.of_row(row)
            if defn is not None:
                out[row["name"]] = defn
        return out
