"""The listing queries are each driven by an index on both stores: a filtered page never reads the
whole runs table (the planners' own answers, read with EXPLAIN on a migrated database)."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg

import lockgate as lg
from lockgate.inspect import locate
from lockgate.store.listing import FOREVER
from lockgate.store.sql_files import load_queries

BASE: dict[str, Any] = {
    "workflow": None,
    "status": None,
    "parent_id": None,
    "source": None,
    "id_prefix": None,
    "dead_letter": 0,
    "lower_at": 0.0,
    "upper_at": 1e300,
    "upper_id": "z",
    "limit": 50,
    "since": 0.0,
}
# Each query with the filters that choose it (store/listing.py), the others left out.
PARAMS: dict[str, dict[str, Any]] = {
    "runs_page_by_time": {},
    "runs_page_by_workflow": {"workflow": "w", "status": "failed"},
    "runs_page_by_status": {"status": "failed", "dead_letter": 1},
    "runs_page_by_source": {"source": "api"},
    "runs_page_by_parent": {"parent_id": "run_p"},
    "runs_page_by_id": {"id_prefix": "run_0abcdefgh", "id_lo": "run_0abcdefgh", "id_hi": "run_0abcdefgi"},
    "runs_per_hour": {},
}

# The index each query must be driven by (the time walk: the creation-time index).
EXPECTED = {
    "runs_page_by_time": "lockgate_runs_created",
    "runs_page_by_workflow": "lockgate_runs_workflow",
    "runs_page_by_status": "lockgate_runs_status",
    "runs_page_by_source": "lockgate_runs_source",
    "runs_page_by_parent": "lockgate_runs_parent",
    "runs_page_by_id": "",  # the primary key: its name differs between the stores
    "runs_per_hour": "lockgate_runs_created",
}


def _plans(store_url: str) -> dict[str, str]:
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgres"
    queries = load_queries(dialect)
    plans: dict[str, str] = {}
    if dialect == "sqlite":
        path = locate(store_url).path
        assert path is not None
        with sqlite3.connect(path) as conn:
            for name in EXPECTED:
                rows = conn.execute("EXPLAIN QUERY PLAN " + queries[name], {**BASE, **PARAMS[name]}).fetchall()
                plans[name] = "\n".join(str(r[3]) for r in rows)
        return plans
    with psycopg.connect(store_url) as conn:
        conn.execute("SET enable_seqscan = off")  # a sequential scan then appears only where no index serves
        for name in EXPECTED:
            rows = conn.execute("EXPLAIN " + queries[name], {**BASE, **PARAMS[name]}).fetchall()
            plans[name] = "\n".join(str(r[0]) for r in rows)
    return plans


async def test_every_listing_query_is_driven_by_an_index(store_url: str) -> None:
    async with lg.Client(lg.App(), store_url):  # migrates
        pass
    for name, plan in _plans(store_url).items():
        assert "Seq Scan on lockgate_runs" not in plan, (name, plan)
        assert not any(line.strip() == "SCAN lockgate_runs" for line in plan.splitlines()), (name, plan)
        assert "SCAN lockgate_runs USING COVERING INDEX" not in plan, (name, plan)  # a whole index, read
        if store_url.startswith("sqlite"):  # it plans without statistics: the plan it runs is this one
            assert EXPECTED[name] in plan, (name, plan)
            if name == "runs_page_by_id":
                assert "sqlite_autoindex_lockgate_runs" in plan, plan
        else:  # PostgreSQL picks among the usable indexes by its statistics: one of them, never the table
            assert "Index Scan" in plan or "Bitmap Index Scan" in plan, (name, plan)


async def test_a_page_from_the_oldest_run_gives_the_planner_no_lower_bound(pg_url: str) -> None:
    """Retention deletes the oldest runs, whose entries stay at the low end of the creation-time index until
    a vacuum. Given a lower bound below its statistics, the planner reads the smallest live ``created_at``
    from that index at each plan, stepping over every such entry (PostgreSQL 15): 1,900 pages and 2 to 25 ms
    a plan at ten million runs, after a day of a million was retired. A page with no lower bound (the
    store's ``-FOREVER``) must give it none; a real one stays in the plan."""
    async with lg.Client(lg.App(), pg_url):  # migrates
        pass
    queries = load_queries("postgres")
    with psycopg.connect(pg_url) as conn:
        for name in [n for n in EXPECTED if n.startswith("runs_page")]:
            unbounded = {**BASE, **PARAMS[name], "lower_at": -FOREVER}
            plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + queries[name], unbounded).fetchall())
            assert "created_at >=" not in plan, (name, plan)
            bounded = {**unbounded, "lower_at": 1000.0}
            plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + queries[name], bounded).fetchall())
            assert "created_at >= '1000'" in plan, (name, plan)
