"""The claim is driven by the runnable index on both stores, with routing and versions declared or not:
its workflow, version and patches filters apply to the due runs that index yields, never to the table
(the planners' own answers, read with EXPLAIN on a migrated database)."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest

import lockgate as lg
from lockgate.inspect import locate
from lockgate.routing import Offer, claim_filter
from lockgate.store.sql_files import load_queries

DEFAULT = claim_filter({"a": Offer(("",)), "b": Offer(("",))})  # no version, no patch: every app's case
ROUTED = claim_filter({"a": Offer(("2", "1"), ("p1", "p2")), "b": Offer(("3",))})  # versions and patches


def _params(keys: str, patches: str) -> dict[str, Any]:
    return {"owner": "w1", "now": 100.0, "lease_until": 115.0, "limit": 10, "keys": keys, "patches": patches}


def _plan(store_url: str, params: dict[str, Any]) -> str:
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgres"
    query = load_queries(dialect)["claim_runs"]
    if dialect == "sqlite":
        path = locate(store_url).path
        assert path is not None
        with sqlite3.connect(path) as conn:
            return "\n".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + query, params).fetchall())
    with psycopg.connect(store_url) as conn:
        conn.execute("SET enable_seqscan = off")  # a sequential scan then appears only where no index serves
        return "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + query, params).fetchall())


@pytest.mark.parametrize("claim", [DEFAULT, ROUTED], ids=["default", "versions-and-patches"])
async def test_the_claim_is_driven_by_the_runnable_index(store_url: str, claim: tuple[str, str]) -> None:
    async with lg.Client(lg.App(), store_url):  # migrates
        pass
    plan = _plan(store_url, _params(*claim))
    assert "lockgate_runs_runnable" in plan, plan
    assert "Seq Scan on lockgate_runs" not in plan, plan
    assert not any(line.strip() == "SCAN lockgate_runs" for line in plan.splitlines()), plan
