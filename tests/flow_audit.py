"""The instants at which the store granted step flow-control starts, as it recorded them.

A body's own clock reading comes after its grant, by however long the machine took to run it: on
a loaded machine two bodies granted a whole period apart can read their clocks a few milliseconds
apart, and a rate check on those readings fails a limit that held. The store's window is what
decides, so the rate tests check it: a trigger copies every start the store records for a key
(``lockgate_flow_starts``, which the store prunes as its window moves) into a table of the test's
own, and the bodies' count must match the grants' count, so no body can start without one. A start a
hand-off granted and the store took back (the run parked before its step ran: the start is deleted
while its slot still runs under it) is marked withdrawn and is not a grant.

A weighted key's starts carry the units they reserved, and a second trigger copies each settlement
(the units a call really used, written over its reservation) as it happens. Both are numbered in the
order they were written: decisions on one key hold its lock until they commit, so that order is the
order the store decided in, and ``units_events`` replays it (``check_units``).
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from urllib.parse import urlsplit

SQLITE = """
CREATE TABLE IF NOT EXISTS test_flow_audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, at REAL NOT NULL,
    start INTEGER, units INTEGER, settled INTEGER, withdrawn INTEGER);
CREATE TRIGGER IF NOT EXISTS test_flow_audit_copy AFTER INSERT ON lockgate_flow_starts
BEGIN INSERT INTO test_flow_audit (key, at, start, units) VALUES (NEW.key, NEW.at, NEW.id, NEW.units); END;
CREATE TRIGGER IF NOT EXISTS test_flow_audit_settle AFTER UPDATE OF settled ON lockgate_flow_starts
BEGIN INSERT INTO test_flow_audit (key, at, start, units, settled)
    VALUES (NEW.key, NEW.at, NEW.id, NEW.units, NEW.settled); END;
CREATE TRIGGER IF NOT EXISTS test_flow_audit_withdraw AFTER DELETE ON lockgate_flow_starts
WHEN OLD.slot_id IS NOT NULL AND EXISTS (SELECT 1 FROM lockgate_flow_slots s
    WHERE s.id = OLD.slot_id AND s.state = 'running' AND s.started_at = OLD.at)
BEGIN UPDATE test_flow_audit SET withdrawn = 1 WHERE start = OLD.id AND settled IS NULL; END;
"""

POSTGRES = """
CREATE TABLE IF NOT EXISTS test_flow_audit (
    seq BIGSERIAL PRIMARY KEY, key TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    start BIGINT, units INTEGER, settled INTEGER, withdrawn INTEGER);
CREATE OR REPLACE FUNCTION test_flow_audit_copy() RETURNS trigger AS $$
BEGIN INSERT INTO test_flow_audit (key, at, start, units) VALUES (NEW.key, NEW.at, NEW.id, NEW.units);
RETURN NEW; END $$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION test_flow_audit_settle() RETURNS trigger AS $$
BEGIN INSERT INTO test_flow_audit (key, at, start, units, settled)
    VALUES (NEW.key, NEW.at, NEW.id, NEW.units, NEW.settled);
RETURN NEW; END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS test_flow_audit_copy ON lockgate_flow_starts;
CREATE TRIGGER test_flow_audit_copy AFTER INSERT ON lockgate_flow_starts
FOR EACH ROW EXECUTE FUNCTION test_flow_audit_copy();
DROP TRIGGER IF EXISTS test_flow_audit_settle ON lockgate_flow_starts;
CREATE TRIGGER test_flow_audit_settle AFTER UPDATE OF settled ON lockgate_flow_starts
FOR EACH ROW EXECUTE FUNCTION test_flow_audit_settle();
CREATE OR REPLACE FUNCTION test_flow_audit_withdraw() RETURNS trigger AS $$
BEGIN
IF OLD.slot_id IS NOT NULL AND EXISTS (SELECT 1 FROM lockgate_flow_slots s
    WHERE s.id = OLD.slot_id AND s.state = 'running' AND s.started_at = OLD.at) THEN
    UPDATE test_flow_audit SET withdrawn = 1 WHERE start = OLD.id AND settled IS NULL;
END IF;
RETURN OLD; END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS test_flow_audit_withdraw ON lockgate_flow_starts;
CREATE TRIGGER test_flow_audit_withdraw AFTER DELETE ON lockgate_flow_starts
FOR EACH ROW EXECUTE FUNCTION test_flow_audit_withdraw();
"""


def _sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


def audit_flow_starts(store_url: str) -> None:
    """From now on, keep every start the store at ``store_url`` records (its tables must exist)."""
    if store_url.startswith("sqlite:"):
        with sqlite3.connect(_sqlite_path(store_url), timeout=30) as conn:
            conn.executescript(SQLITE)
        return
    import psycopg

    with psycopg.connect(store_url, autocommit=True) as pg:
        pg.execute(POSTGRES)


def _rows(store_url: str, sql: str) -> list[tuple[object, ...]]:
    if store_url.startswith("sqlite:"):
        with sqlite3.connect(_sqlite_path(store_url), timeout=30) as conn:
            return list(conn.execute(sql).fetchall())
    import psycopg

    assert urlsplit(store_url).scheme.startswith("postgres")
    with psycopg.connect(store_url, autocommit=True) as pg:
        return list(pg.execute(sql).fetchall())


def granted_starts(store_url: str) -> dict[str, list[float]]:
    """Every start recorded since ``audit_flow_starts`` and not taken back, per key, oldest first."""
    starts: dict[str, list[float]] = defaultdict(list)
    sql = "SELECT key, at FROM test_flow_audit WHERE settled IS NULL AND withdrawn IS NULL ORDER BY at"
    for key, at in _rows(store_url, sql):
        starts[str(key)].append(float(at))  # type: ignore[arg-type]
    return dict(starts)


@dataclass(frozen=True)
class UnitEvent:
    """A start admitted with ``units`` reserved (``settled`` ``None``), or a start's settlement."""

    start: int
    at: float
    units: int
    settled: int | None


def units_events(store_url: str) -> dict[str, list[UnitEvent]]:
    """Every admission and settlement recorded since ``audit_flow_starts``, per key, in the order written."""
    events: dict[str, list[UnitEvent]] = defaultdict(list)
    rows = _rows(store_url, "SELECT key, start, at, units, settled FROM test_flow_audit ORDER BY seq")
    for key, start, at, units, settled in rows:
        settled_units = None if settled is None else int(settled)  # type: ignore[call-overload]
        event = UnitEvent(int(start), float(at), int(units), settled_units)  # type: ignore[call-overload, arg-type]
        events[str(key)].append(event)
    return dict(events)


def check_units(events: list[UnitEvent], rate: int, period: float) -> tuple[int, int]:
    """Replay one key's admissions and settlements in the order the store wrote them and check its rule:
    at each admission the units counted in the trailing period (each earlier start's reservation until it
    is settled, then what it settled at) plus the new reservation fit ``rate``.

    Then check the documented bound on what the window holds once everything settled: in the trailing
    period of any admission, at most ``rate`` plus the under-estimates (settled above reserved) of the
    starts in it that were not settled yet when it was admitted (the window as of that admission: the
    starts admitted up to it). The most units any admission saw counted
    with its own, and the most any such window holds settled.
    """
    rows: dict[int, list[float | int | None]] = {}  # start -> [at, units, settled]
    most_counted = 0
    pending: dict[int, set[int]] = {}  # admission -> starts in its window unsettled when it was admitted
    for e in events:
        if e.settled is not None:
            if e.start in rows:
                rows[e.start][2] = e.settled
            continue
        inside = {s: r for s, r in rows.items() if float(r[0]) > e.at - period}  # type: ignore[arg-type]
        counted = sum(int(r[2] if r[2] is not None else r[1]) for r in inside.values())  # type: ignore[call-overload]
        assert counted + e.units <= rate, (e, counted, rate)
        most_counted = max(most_counted, counted + e.units)
        pending[e.start] = {s for s, r in inside.items() if r[2] is None}
        rows[e.start] = [e.at, e.units, None]
    most_settled = 0
    admitted = list(pending)  # in the order admitted
    for i, start in enumerate(admitted):
        unsettled = pending[start]
        at = float(rows[start][0])  # type: ignore[arg-type]
        inside = [s for s in admitted[: i + 1] if float(rows[s][0]) > at - period]  # type: ignore[arg-type]
        final = sum(int(rows[s][2] if rows[s][2] is not None else rows[s][1]) for s in inside)  # type: ignore[call-overload]
        over = sum(max(0, int(rows[s][2] or 0) - int(rows[s][1] or 0)) for s in unsettled | {start})  # type: ignore[call-overload]
        assert final <= rate + over, (start, final, rate, over)
        most_settled = max(most_settled, final)
    return most_counted, most_settled
