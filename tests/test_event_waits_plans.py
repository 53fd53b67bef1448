"""A publish finds its waiters, and a wait its events, through an index: 10,000 waits on distinct keys,
both before the tables' statistics know of them (runs parked since the last ANALYZE) and after."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import psycopg

import lockgate as lg
from lockgate.matching import leaf_keys, wait_key
from lockgate.store.sql_files import load_queries

from .apps.event_waits import app
from .test_event_waits import KEY
from .test_gate_plans import _rows_read

N = 10_000
PG_FILL = [
    "INSERT INTO lockgate_runs (id, workflow, identity, status, payload, created_at, updated_at, progress_at,"
    " entries, epoch, waiting_on) SELECT 'r' || g, 'ew.ship', 'r' || g, 'running', '{}', 0, 0, 0, 1, 1,"
    " 'event:order.shipped' FROM generate_series(1, %(n)s) g",
    "INSERT INTO lockgate_event_waits (run_id, step_key, key, name, since, created_at)"
    " SELECT 'r' || g, 'event:order.shipped#0', md5(g::text), 'order.shipped', 0, 0 FROM generate_series(1, %(n)s) g",
    "INSERT INTO lockgate_events (id, name, key, data, source, occurred_at)"
    " SELECT 'e' || g, 'order.shipped', '{}', '{}', 'api', g FROM generate_series(1, %(n)s) g",
    "INSERT INTO lockgate_event_keys (key, occurred_at, event_id)"
    " SELECT md5(g::text), g, 'e' || g FROM generate_series(1, %(n)s) g",
    # one wait and one event under the key the statements look for: they find it, and only it
    "UPDATE lockgate_event_waits SET key = %(hit)s WHERE run_id = 'r1'",
    "UPDATE lockgate_event_keys SET key = %(hit)s WHERE event_id = 'e1'",
]
HIT = wait_key("order.shipped", {"order_id": json.dumps("o-new")})


def _params() -> dict[str, dict[str, Any]]:
    keys = json.dumps(leaf_keys("order.shipped", json.dumps({"order_id": "o-new", "carrier": "c"})))
    one = json.dumps([HIT])
    return {
        "wake_event_waiters": {"keys": keys, "now": 1.0},
        "claim_woken_waiters": {
            "keys": keys,
            "now": 1.0,
            "owner": "w1",
            "lease_until": 30.0,
            "limit": 4,
            "claim_keys": json.dumps(["ew.ship\x1f"]),
            "patches": "{}",
        },
        "event_candidates": {
            "keys": one,
            "run_id": "r1",
            "since": 0.0,
            "after_at": -1.0,
            "after_id": "",
            "limit": 100,
        },
    }


async def test_the_wake_and_the_lookup_read_a_handful_of_rows_among_10000_waits(store_url: str) -> None:
    async with lg.Client(app, store_url, encryption_keys=[KEY]):
        pass  # migrated
    if store_url.startswith("postgresql"):
        queries = load_queries("postgres")
        with psycopg.connect(store_url, autocommit=True) as conn:
            for statement in PG_FILL:
                conn.execute(statement, {"n": N, "hit": HIT})  # type: ignore[arg-type]
            for analyzed in (False, True):
                if analyzed:
                    conn.execute("ANALYZE")
                for name, params in _params().items():
                    conn.execute("BEGIN")
                    try:
                        row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries[name], params).fetchone()
                    finally:
                        conn.execute("ROLLBACK")
                    assert row is not None
                    read = _rows_read(row[0][0]["Plan"])
                    plan = json.dumps(row[0][0]["Plan"])[:2000]
                    assert 1 <= read <= 10, f"{name} (analyzed: {analyzed}) read {read} rows: {plan}"
        return
    queries = load_queries("sqlite")
    conn = sqlite3.connect(store_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.execute(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)"
            " INSERT INTO lockgate_event_waits (run_id, step_key, key, name, since, created_at)"
            " SELECT 'r' || n, 'k', hex(randomblob(16)), 'order.shipped', 0, 0 FROM g",
            (N,),
        )
        conn.execute(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)"
            " INSERT INTO lockgate_event_keys (key, occurred_at, event_id)"
            " SELECT hex(randomblob(16)), n, 'e' || n FROM g",
            (N,),
        )
        conn.execute("COMMIT")
        for analyzed in (False, True):
            if analyzed:
                conn.execute("ANALYZE")
            for name, params in _params().items():
                plan = " | ".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + queries[name], params))
                for table in ("lockgate_event_waits", "lockgate_event_keys"):
                    assert f"SCAN {table}" not in plan and "SCAN w" not in plan and "SCAN k" not in plan, plan
    finally:
        conn.close()
