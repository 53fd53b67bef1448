"""The instants at which the store granted step flow-control starts, as it recorded them.

A body's own clock reading comes after its grant, by however long the machine took to run it: on
a loaded machine two bodies granted a whole period apart can read their clocks a few milliseconds
apart, and a rate check on those readings fails a limit that held. The store's window is what
decides, so the rate tests check it: a trigger copies every start the store records for a key
(``lockgate_flow_starts``, which the store prunes as its window moves) into a table of the test's
own, and the bodies' count must match the grants' count, so no body can start without one.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from urllib.parse import urlsplit

SQLITE = """
CREATE TABLE IF NOT EXISTS test_flow_audit (key TEXT NOT NULL, at REAL NOT NULL);
CREATE TRIGGER IF NOT EXISTS test_flow_audit_copy AFTER INSERT ON lockgate_flow_starts
BEGIN INSERT INTO test_flow_audit (key, at) VALUES (NEW.key, NEW.at); END;
"""

POSTGRES = """
CREATE TABLE IF NOT EXISTS test_flow_audit (key TEXT NOT NULL, at DOUBLE PRECISION NOT NULL);
CREATE OR REPLACE FUNCTION test_flow_audit_copy() RETURNS trigger AS $$
BEGIN INSERT INTO test_flow_audit (key, at) VALUES (NEW.key, NEW.at); RETURN NEW; END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS test_flow_audit_copy ON lockgate_flow_starts;
CREATE TRIGGER test_flow_audit_copy AFTER INSERT ON lockgate_flow_starts
FOR EACH ROW EXECUTE FUNCTION test_flow_audit_copy();
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


def granted_starts(store_url: str) -> dict[str, list[float]]:
    """Every start recorded since ``audit_flow_starts``, per key, oldest first."""
    if store_url.startswith("sqlite:"):
        with sqlite3.connect(_sqlite_path(store_url), timeout=30) as conn:
            rows = conn.execute("SELECT key, at FROM test_flow_audit ORDER BY at").fetchall()
    else:
        import psycopg

        assert urlsplit(store_url).scheme.startswith("postgres")
        with psycopg.connect(store_url, autocommit=True) as pg:
            rows = pg.execute("SELECT key, at FROM test_flow_audit ORDER BY at").fetchall()
    starts: dict[str, list[float]] = defaultdict(list)
    for key, at in rows:
        starts[str(key)].append(float(at))
    return dict(starts)
