"""The window of a weighted step flow key (``FlowControl(cost=)``, ``ctx.rate_limit(cost=)``): units, not calls.

Each start in a key's window (``lockgate_flow_starts``) carries the units it reserved; once its
call settles, the units it really used count in their place. A call of ``cost`` units is admitted
only when the units counted in the trailing period plus its own reservation fit the rate
(``units_room``), so the units counted at any admission never exceed the rate; a call settled
above its reservation can take the window over the rate by its under-estimate only, and nothing
more is admitted until the window is back under. A key counted in calls keeps its rows at one
unit each and never reaches this module's decisions. The callers hold the key's lock
(``store/flow.py``). ``key_states``: every key as ``flow-keys`` reads it, its units beside its calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Row, Tx

__all__ = [
    "KeyState",
    "UnitStats",
    "add_units",
    "add_waiter",
    "key_states",
    "set_weighted",
    "settle",
    "take_units",
    "unit_head",
    "unit_stats",
    "units_opening",
    "units_room",
    "units_used",
]


async def units_used(tx: Tx, key: str, since: float) -> int:
    """The units counted in ``key``'s window after ``since``: reservations, or what their calls settled at."""
    return int(await tx.scalar("stepflow_units_used", {"key": key, "since": since}) or 0)


async def units_opening(tx: Tx, key: str, since: float, need: int, period: float, now: float) -> float:
    """The first instant ``need`` more units fit ``key``'s window (counted after ``since``)."""
    at = await tx.scalar("stepflow_units_opening", {"key": key, "since": since, "need": need})
    return now + period if at is None else float(at) + period


async def units_room(tx: Tx, state: Row, now: float, cost: int, running: int = 0) -> tuple[bool, float | None]:
    """Whether a call of ``cost`` units may start under the weighted key ``state`` now; when not, the
    earliest instant it may (``None``: when a slot frees, or the pause is lifted by hand). ``running``:
    slots taken in this transaction beside those ``state`` counted."""
    if int(state["paused"]):
        until = float(state["paused_until"])
        return False, None if until >= 1e300 else until
    if state["parallelism"] is not None and int(state["running"]) + running >= int(state["parallelism"]):
        return False, None
    rate, period = int(state["rate"]), float(state["period"])
    since = now - period
    used = await units_used(tx, state["key"], since)
    if used + cost <= rate:
        return True, None
    return False, await units_opening(tx, state["key"], since, used + cost - rate, period, now)


async def add_units(tx: Tx, key: str, at: float, units: int) -> int:
    """A call of ``units`` admitted at ``at``: its reservation in the window, and that start's id (to settle it)."""
    return await tx.insert("stepflow_add_units", {"key": key, "at": at, "units": units})


async def settle(tx: Tx, key: str, start: int, units: int) -> None:
    """The call admitted as ``start`` used ``units``: they count in the window in its reservation's place."""
    await tx.execute("stepflow_settle", {"key": key, "id": start, "units": units})


async def take_units(tx: Tx, key: str, limit: int, period: float, now: float, units: int) -> float | None:
    """``ctx.rate_limit(cost=)``: reserve ``units`` of the window ``key``; ``None``, else when they fit."""
    since = now - period
    used = await units_used(tx, key, since)
    if used + units > limit:
        return await units_opening(tx, key, since, used + units - limit, period, now)
    await tx.execute("stepflow_prune_starts", {"key": key, "before": since})
    await add_units(tx, key, now, units)
    return None


async def unit_head(tx: Tx, key: str) -> Row | None:
    """The first of ``key``'s line (``run_id, step_key, units, owner, epoch, lease_until, wake_at``), if any."""
    return await tx.one("stepflow_unit_head", {"key": key})


async def add_waiter(
    tx: Tx, place: dict[str, Any], priority: int, now: float, attempt: int, first: Any, units: int
) -> None:
    """The step at ``place`` (``key, run_id, step_key``) waits in the weighted key's line, asking for ``units``."""
    params = {**place, "priority": priority, "now": now, "attempt": attempt, "first": first, "units": units}
    await tx.execute("stepflow_add_unit_waiter", params)


async def set_weighted(tx: Tx, key: str, weighted: bool) -> None:
    """Whether ``key`` counts units, as the code that declares it says."""
    await tx.execute("stepflow_set_weighted", {"key": key, "weighted": 1 if weighted else None})


@dataclass(frozen=True)
class UnitStats:
    """A weighted key's window now: units ``reserved`` by calls not yet settled, and ``settled``."""

    reserved: int
    settled: int


async def unit_stats(tx: Tx, key: str, since: float) -> UnitStats:
    row = await tx.one("stepflow_unit_stats", {"key": key, "since": since})
    if row is None:
        return UnitStats(0, 0)
    return UnitStats(int(row["reserved"] or 0), int(row["settled"] or 0))


@dataclass(frozen=True)
class KeyState:
    """A key as ``flow-keys`` shows it: its limits and what it holds now (``started``: the starts in its
    window; a weighted key's units there, reserved and settled, beside them)."""

    key: str
    rate: int | None
    period: float
    parallelism: int | None
    declared: bool
    running: int
    waiting: int
    started: int
    oldest_waiting: float | None
    paused_until: float | None
    paused: bool
    pause_reason: str | None
    burst: int | None = None  # the rate is a token bucket (``lockgate.buckets``)
    weighted: bool = False  # the rate counts units (``FlowControl(cost=)``), not calls
    units_reserved: int = 0  # a weighted key: units in the window reserved by calls not yet settled
    units_settled: int = 0  # a weighted key: units in the window that calls settled at

    @property
    def units_available(self) -> int | None:
        """A weighted key's units free in its window now (``None``: the key counts calls)."""
        if not self.weighted or self.rate is None:
            return None
        return max(0, self.rate - self.units_reserved - self.units_settled)


async def key_states(tx: Tx, now: float, key: str | None = None) -> list[KeyState]:
    """Every key's limits and state (or the one ``key``'s; empty if it has no row)."""
    if key is not None:
        row = await tx.one("stepflow_get_key", {"key": key})
        rows = [] if row is None else [row]
    else:
        rows = await tx.execute("stepflow_list_keys")
    out: list[KeyState] = []
    for row in rows:
        k = row["key"]
        stats = await tx.one("stepflow_key_stats", {"key": k})
        pause = await tx.one("stepflow_key_pause", {"key": k, "now": now})
        started = await tx.one("stepflow_started", {"key": k, "since": now - float(row["period"])})
        oldest = None if stats is None else stats["oldest_waiting"]
        weighted = bool(row["weighted"])
        units = await unit_stats(tx, k, now - float(row["period"])) if weighted else UnitStats(0, 0)
        out.append(
            KeyState(
                key=k,
                rate=row["rate"],
                period=float(row["period"]),
                parallelism=row["parallelism"],
                declared=row["declared"] is not None,
                running=int(await tx.scalar("stepflow_running", {"key": k, "now": now})),
                waiting=0 if stats is None else int(stats["waiting"]),
                started=0 if started is None else int(started["n"]),
                oldest_waiting=None if oldest is None else float(oldest),
                paused=pause is not None,
                paused_until=None if pause is None or pause["until"] is None else float(pause["until"]),
                pause_reason=None if pause is None else pause["reason"],
                burst=None if row["burst"] is None else int(row["burst"]),
                weighted=weighted,
                units_reserved=units.reserved,
                units_settled=units.settled,
            )
        )
    return out
