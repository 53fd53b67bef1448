"""Step flow-control keys as an operator reads them: ``FlowKeyRow`` and the ``flow_keys`` read."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..store import flow
from ..store.base import Tx

__all__ = ["FlowKeyRow", "flow_keys"]


@dataclass(frozen=True)
class FlowKeyRow:
    """One step flow-control key: its limits in force and what it holds now.

    ``running``: steps holding a slot; ``waiting``: steps in its line (their runs parked
    with ``waiting_on="flow"`` or about to be); ``started``: starts in the current window;
    ``oldest_waiting``: seconds the first in line has waited; ``source``: ``declared`` (set
    from code) or ``operator`` (set by hand, which declarations no longer change); ``burst``:
    the starts an idle key lets through at once beyond its rate's pace (``None``: the rate is
    a sliding window). A weighted key (``weighted``: its rate counts units, ``FlowControl(cost=)``)
    also gives the units in its window: ``units_reserved`` by calls not yet settled,
    ``units_settled`` by those settled, and ``units_available`` (the rate less both, at least 0);
    ``None`` each for a key that counts calls.
    """

    key: str
    rate: int | None
    period: float
    parallelism: int | None
    source: str
    running: int
    waiting: int
    started: int
    oldest_waiting: float | None
    paused: bool
    paused_until: float | None
    pause_reason: str | None
    burst: int | None = None
    weighted: bool = False
    units_reserved: int | None = None
    units_settled: int | None = None
    units_available: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def flow_keys(tx: Tx, now: float, key: str | None = None) -> list[FlowKeyRow]:
    """Every key (or the one ``key``), by name. A store operation (``store.read(flow_keys, now)``)."""
    return [
        FlowKeyRow(
            key=s.key,
            rate=s.rate,
            period=s.period,
            parallelism=s.parallelism,
            source="declared" if s.declared else "operator",
            running=s.running,
            waiting=s.waiting,
            started=s.started,
            oldest_waiting=None if s.oldest_waiting is None else max(0.0, now - s.oldest_waiting),
            paused=s.paused,
            paused_until=s.paused_until,
            pause_reason=s.pause_reason,
            burst=s.burst,
            weighted=s.weighted,
            units_reserved=s.units_reserved if s.weighted else None,
            units_settled=s.units_settled if s.weighted else None,
            units_available=s.units_available,
        )
        for s in await flow.key_states(tx, now, key)
    ]
