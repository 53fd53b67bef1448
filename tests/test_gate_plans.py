"""The gate's statements on the start and drain path cost the same however many starts are parked.

Each statement runs (its writes rolled back) on a migrated database holding a backlog of starts
parked at one concurrency key, with the planner's statistics taken (ANALYZE), at two backlog
sizes. What it reads must not grow with the backlog: on PostgreSQL the rows its scans read
(EXPLAIN ANALYZE: rows returned and rows filtered out, times loops), on SQLite the virtual
machine steps it takes. A statement planned to read every parked row (a hashed SubPlan, a
GROUP BY over the parked rows, a scan sorted afterwards) reads ten times more at ten times the
backlog. ``python -m tests.test_gate_plans URL SIZE`` prints the figures at any size.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

import lockgate as lg
from lockgate.inspect import locate
from lockgate.store.direct import numbered
from lockgate.store.postgres.connections import PLANNER
from lockgate.store.sql_files import load_queries

from .pg import pg_database_url
from .test_claim_plans import DEFAULT
from .test_claim_plans import _params as claim_values

SCOPE, KEY, WORKFLOW = "wf:backlog", "", "backlog"
NOW = 1_800_000_000.0
SMALL, LARGE = 2_000, 20_000
GROWTH = 1.5  # what reading a few more rows of a deeper index, or a bigger table's pages, may add


def _params() -> dict[str, dict[str, Any]]:
    """Each statement of the start and drain path with the arguments the gate gives it."""
    slot = json.dumps([[SCOPE, KEY]])
    admitted = json.dumps([["pnd_000000000001", "run_new_1", "{}", SCOPE, KEY]])
    return {
        # an arrival: is anything ahead, what is in use, where does it go
        "slot_queues": {"slots": slot},
        "window_queues": {"windows": json.dumps([[SCOPE, KEY, 10]])},
        "waiting_ahead": {"mode": "concurrency", "scope": SCOPE, "key": KEY},
        "slots_in_use": {"scope": SCOPE, "key": KEY},
        "pending_by_identity": {"identity": "idn_x"},
        "open_groups": {"group_keys": json.dumps(["grp_x"])},
        "singleton_pending": {"singleton_key": "one", "exclude": ""},
        "insert_pending_rows": _pending_row("pnd_new"),
        "insert_ledger_rows": _ledger_row(),
        # the drainer's pass
        "drain_probe": {},
        "waiting_keys": {},
        "waiting_for_key": {"scope": SCOPE, "key": KEY, "limit": 10},
        "due_pending_order": {"now": NOW, "limit": 500},
        "expired_pending": {"now": NOW, "limit": 500},
        "next_pending_due": {},
        "orphan_slots": {"now": NOW, "limit": 500},
        "overdue_runs": {"now": NOW, "limit": 500},
        "pending_by_ids": {"ids": json.dumps(["pnd_000000000001", "pnd_000000000002"])},
        "admit_parked_runs": {
            "admitted": admitted,
            "workflow": WORKFLOW,
            "version": "v",
            "patches": "[]",
            "recording": "full",
            "deadline_at": None,
            "on_failure": None,
            "claims": 0,
            "owner": None,
            "lease_until": None,
            "now": NOW,
        },
        "admit_parked_ledger": {"admitted": admitted, "now": NOW},
        "admit_parked_delete": {"admitted": admitted},
        # a freed slot handed on
        "free_slot": {"run_id": "run_slot_1"},
        "handoff_rows": {"scope": SCOPE, "key": KEY, "limit": 10, "lease": 15.0, "now": NOW},
        "handoff_transfer": {"scope": SCOPE, "key": KEY, "limit": 10, "lease": 15.0, "now": NOW, "freed": 3},
        "handoff_line": {"scope": SCOPE, "key": KEY, "limit": 10, "freed": 3},
        "delete_pending": {"id": "pnd_000000000003"},
        # what flow() and the dashboard's flow page read
        "flow_pending": {"workflow": None},
        "flow_pending@workflow": {"workflow": WORKFLOW},
        "flow_slots": {"workflow": None},
        "flow_counts": {"workflow": None},
    }


def _pending_row(pending_id: str) -> dict[str, Any]:
    return {
        "id": pending_id,
        "workflow": WORKFLOW,
        "ticket": "tkt_new",
        "mode": "concurrency",
        "stage": "key_pause",
        "hold_scope": SCOPE,
        "hold_key": KEY,
        "group_key": None,
        "singleton_key": None,
        "payload": "{}",
        "items": None,
        "keys": None,
        "identity": None,
        "idempotency_key": None,
        "folded": 1,
        "priority": 0,
        "fair_key": None,
        "on_failure": None,
        "retry_of": None,
        "source": "client",
        "trace_id": None,
        "subject": None,
        "first_at": NOW,
        "last_at": NOW,
        "due_at": None,
        "expires_at": None,
    }


def _ledger_row() -> dict[str, Any]:
    return {
        "ticket": "tkt_new",
        "kind": "arrival",
        "workflow": WORKFLOW,
        "control": "concurrency",
        "key": KEY,
        "outcome": "queued",
        "reason": None,
        "folded": 1,
        "waited": None,
        "pending_id": "pnd_new",
        "run_id": None,
        "at": NOW,
        "source": "client",
        "trace_id": None,
    }


# -- a backlog, written straight into a migrated database --------------------------------------

PG_BACKLOG = [
    """INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, folded, pending_id, at, source)
    SELECT 'tkt_' || lpad(i::text, 12, '0'), 'arrival', %(workflow)s, 'concurrency', %(key)s, 'queued', 1,
        'pnd_' || lpad(i::text, 12, '0'), %(now)s::float8 - %(n)s::int + i, 'client'
    FROM generate_series(1, %(n)s::int) AS i""",
    """INSERT INTO lockgate_pending (id, workflow, ticket, mode, stage, hold_scope, hold_key, payload, keys, source,
        seq, first_at, last_at)
    SELECT 'pnd_' || lpad(i::text, 12, '0'), %(workflow)s, 'tkt_' || lpad(i::text, 12, '0'), 'concurrency',
        'key_pause', %(scope)s, %(key)s, '{"n":' || i || '}', '{"concurrency": ""}', 'client', i,
        %(now)s::float8 - %(n)s::int + i, %(now)s::float8 - %(n)s::int + i
    FROM generate_series(1, %(n)s::int) AS i""",
    """INSERT INTO lockgate_runs (id, workflow, identity, status, payload, created_at, updated_at, progress_at,
        wake_at, slot_scope, slot_key)
    SELECT 'run_slot_' || i, %(workflow)s, 'run_slot_' || i, 'running', '{}', %(now)s, %(now)s, %(now)s, %(now)s,
        %(scope)s, %(key)s
    FROM generate_series(1, 10) AS i""",
    """INSERT INTO lockgate_slots (run_id, scope, key, workflow, acquired_at)
    SELECT 'run_slot_' || i, %(scope)s, %(key)s, %(workflow)s, %(now)s FROM generate_series(1, 10) AS i""",
    """INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, pending_id, at)
    VALUES ('tkt_new', 'arrival', %(workflow)s, 'concurrency', %(key)s, 'queued', 'pnd_new', %(now)s)""",
]

SQLITE_BACKLOG = [
    """WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n)
    INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, folded, pending_id, at, source)
    SELECT printf('tkt_%012d', i), 'arrival', :workflow, 'concurrency', :key, 'queued', 1,
        printf('pnd_%012d', i), :now - :n + i, 'client' FROM s""",
    """WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n)
    INSERT INTO lockgate_pending (id, workflow, ticket, mode, stage, hold_scope, hold_key, payload, keys, source,
        seq, first_at, last_at)
    SELECT printf('pnd_%012d', i), :workflow, printf('tkt_%012d', i), 'concurrency', 'key_pause', :scope, :key,
        '{"n":' || i || '}', '{"concurrency": ""}', 'client', i, :now - :n + i, :now - :n + i FROM s""",
    """WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 10)
    INSERT INTO lockgate_runs (id, workflow, identity, status, payload, created_at, updated_at, progress_at,
        wake_at, slot_scope, slot_key)
    SELECT 'run_slot_' || i, :workflow, 'run_slot_' || i, 'running', '{}', :now, :now, :now, :now, :scope, :key
    FROM s""",
    """WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 10)
    INSERT INTO lockgate_slots (run_id, scope, key, workflow, acquired_at)
    SELECT 'run_slot_' || i, :scope, :key, :workflow, :now FROM s""",
    """INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, pending_id, at)
    VALUES ('tkt_new', 'arrival', :workflow, 'concurrency', :key, 'queued', 'pnd_new', :now)""",
    # the store folds each commit's ledger rows into the counts (store/sqlite.py): so have these been
    """INSERT INTO lockgate_flow_counts (workflow, key, outcome, part, n)
    SELECT workflow, COALESCE(key, ''), outcome, 0, COUNT(*) FROM lockgate_ledger WHERE true GROUP BY 1, 2, 3
    ON CONFLICT (workflow, key, outcome, part) DO UPDATE SET n = n + excluded.n""",
    "UPDATE lockgate_flow_counted SET upto = (SELECT MAX(id) FROM lockgate_ledger)",
]


def _backlog(n: int) -> dict[str, Any]:
    return {"n": n, "workflow": WORKFLOW, "scope": SCOPE, "key": KEY, "now": NOW}


SCANS = ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan", "Function Scan", "CTE Scan")


def _rows_read(node: dict[str, Any]) -> int:
    """Rows the plan's scans of tables read: returned or filtered out, in every loop."""
    read = 0
    if node.get("Node Type") in SCANS and node.get("Relation Name"):
        per_loop = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        per_loop += node.get("Rows Removed by Index Recheck", 0)
        read += int(per_loop * node.get("Actual Loops", 1))
    for child in node.get("Plans", []):
        read += _rows_read(child)
    return read


def pg_reads(url: str, n: int) -> dict[str, tuple[int, float, str]]:
    """Per statement, at ``n`` parked: rows read, milliseconds, and the plan (each rolled back)."""
    queries = load_queries("postgres")
    found: dict[str, tuple[int, float, str]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in PG_BACKLOG:
            conn.execute(statement, _backlog(n))
        conn.execute("ANALYZE")
        for name, params in _params().items():
            sql = queries[name.split("@")[0]]
            conn.execute("BEGIN")
            try:
                (plan,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()  # type: ignore[misc]
                text = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params).fetchall())
            finally:
                conn.execute("ROLLBACK")
            top = plan[0]
            read = _rows_read(top["Plan"]) + sum(_rows_read(t) for t in top.get("Triggers", []) if "Plan" in t)
            found[name] = (read, float(top["Execution Time"]), text)
    return found


def sqlite_reads(path: str, n: int) -> dict[str, tuple[int, float, str]]:
    """Per statement, at ``n`` parked: virtual machine steps, milliseconds, and the plan (each rolled back)."""
    queries = load_queries("sqlite")
    found: dict[str, tuple[int, float, str]] = {}
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for statement in SQLITE_BACKLOG:
            conn.execute(statement, _backlog(n))
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        for name, params in _params().items():
            sql = queries[name.split("@")[0]].replace("FOR UPDATE SKIP LOCKED", "")
            steps = [0]

            def count(steps: list[int] = steps) -> int:
                steps[0] += 1
                return 0

            text = "\n".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall())
            conn.execute("BEGIN")
            conn.set_progress_handler(count, 1)
            began = time.perf_counter()
            try:
                conn.execute(sql, params).fetchall()
            finally:
                ms = (time.perf_counter() - began) * 1e3
                conn.set_progress_handler(None, 0)
                conn.execute("ROLLBACK")
            found[name] = (steps[0], ms, text)
    finally:
        conn.close()
    return found


# -- the tests ------------------------------------------------------------------------------------


@pytest.fixture
def second_url(store_kind: str, tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """Another fresh store of the same kind: the larger backlog's."""
    if store_kind == "sqlite":
        yield f"sqlite:///{tmp_path}/larger.db"
    else:
        yield from pg_database_url(request)


def _measure(url: str) -> Callable[[int], dict[str, tuple[int, float, str]]]:
    if url.startswith("sqlite"):
        path = locate(url).path
        assert path is not None
        return lambda n: sqlite_reads(path, n)
    return lambda n: pg_reads(url, n)


async def test_no_start_or_drain_statement_reads_more_with_a_deeper_backlog(store_url: str, second_url: str) -> None:
    for url in (store_url, second_url):
        async with lg.Client(lg.App(), url):  # migrates
            pass
    small = _measure(store_url)(SMALL)
    large = _measure(second_url)(LARGE)
    for name, (_, _, plan) in large.items():  # the growing tables are searched, never read through
        for table in ("lockgate_pending", "lockgate_ledger"):
            assert not re.search(rf"(Seq Scan on|^\s*SCAN) {table}(\s|$)", plan, re.MULTILINE), (name, plan)
    grown = {
        name: (small[name][0], large[name][0], large[name][2])
        for name in small
        if large[name][0] > GROWTH * max(small[name][0], 20)
    }
    assert not grown, "statements reading more as the backlog grows (small, large, plan): " + repr(grown)


async def test_the_arrival_probes_are_index_probes_on_postgresql(store_url: str) -> None:
    """Written as EXISTS, the probe for a start waiting ahead is planned as a hashed SubPlan over the parked rows."""
    if store_url.startswith("sqlite"):
        pytest.skip("SQLite plans EXISTS as a probe")
    async with lg.Client(lg.App(), store_url):
        pass
    plans = pg_reads(store_url, LARGE)
    for name in ("slot_queues", "window_queues", "waiting_keys", "handoff_rows", "handoff_transfer", "handoff_line"):
        read, _, plan = plans[name]
        assert "hashed SubPlan" not in plan and "Seq Scan on lockgate_pending" not in plan, (name, plan)
        assert read < 100, (name, read, plan)


GROWING = ("lockgate_pending", "lockgate_ledger", "lockgate_runs", "lockgate_slots")
READ_WHOLE = {"flow_slots": "lockgate_slots"}  # what it counts is every slot in use, never the backlog


def generic_plans(url: str, session: str | None) -> dict[str, str]:
    """Each statement's generic plan (what a prepared statement keeps), made on a drained store, analyzed:
    nothing parked, ten runs holding their slots."""
    queries = load_queries("postgres")
    statements = {**_params(), "claim_runs": claim_values(*DEFAULT)}
    found: dict[str, str] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in PG_BACKLOG:
            conn.execute(statement, _backlog(0))
        conn.execute("ANALYZE")
        if session is not None:
            conn.execute(session)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for name, params in statements.items():
            sql = queries[name.split("@")[0]]
            conn.execute("BEGIN")
            try:
                conn.cursor().execute(sql, params, prepare=True)
                text, keys = numbered(sql)
                (prepared,) = conn.execute(  # type: ignore[misc]
                    "SELECT name FROM pg_prepared_statements WHERE statement = %s", (text,)
                ).fetchone()
                values = [params[key] for key in keys]
                explain = pgsql.SQL("EXPLAIN EXECUTE {}").format(pgsql.Identifier(prepared))
                if values:
                    explain += pgsql.SQL("({})").format(pgsql.SQL(", ").join(map(pgsql.Literal, values)))
                found[name] = "\n".join(r[0] for r in conn.execute(explain).fetchall())
            finally:
                conn.execute("ROLLBACK")
    return found


async def test_a_plan_kept_from_an_empty_store_searches_the_growing_tables(store_url: str, second_url: str) -> None:
    """A prepared statement keeps the plan made at its first uses until the next ANALYZE; made on an empty
    table it reads the table through, however large the backlog has grown since. The store's sessions
    plan without sequential scans where an index serves (connections.PLANNER)."""
    if store_url.startswith("sqlite"):
        pytest.skip("SQLite plans each statement as it is prepared, from its indexes")
    for url in (store_url, second_url):
        async with lg.Client(lg.App(), url):
            pass

    def scans(plans: dict[str, str]) -> dict[str, list[str]]:
        found = {
            name: [t for t in re.findall(r"Seq Scan on (\w+)", plan) if t in GROWING and READ_WHOLE.get(name) != t]
            for name, plan in plans.items()
        }
        return {name: tables for name, tables in found.items() if tables}

    unguarded = scans(generic_plans(store_url, None))
    assert "lockgate_pending" in unguarded["admit_parked_delete"], unguarded  # the trap: what the default plans
    plans = generic_plans(second_url, f"SELECT {PLANNER}")
    assert not scans(plans), scans(plans)
    assert not [name for name, plan in plans.items() if "JIT:" in plan]  # priced-out scans left are not compiled


def main(argv: list[str]) -> None:
    """``python -m tests.test_gate_plans URL SIZE``: each statement's reads and time at SIZE parked."""
    import asyncio

    url, size = argv[0], int(argv[1])

    async def migrate() -> None:
        async with lg.Client(lg.App(), url):
            pass

    asyncio.run(migrate())
    for name, (read, ms, plan) in _measure(url)(size).items():
        print(f"{name:24} {read:>10,} {'steps' if url.startswith('sqlite') else 'rows'} {ms:9.2f} ms")
        if "-v" in argv:
            print("    " + plan.replace("\n", "\n    "))


if __name__ == "__main__":
    main(sys.argv[1:])
