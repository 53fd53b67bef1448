"""Step flow control's statements read each waiting run by its id, with or without the planner's statistics.

A step flow key's line joins its waiting rows to their runs. Planned without statistics (a table
filled since its last ANALYZE, as in the first minute of a new store or a burst), a plain join
answered ``status = 'running'`` from the partial runnable index and read every live run once per
waiter. Each statement here runs (rolled back) on a fresh PostgreSQL database never analyzed,
at two sizes of line; the rows it reads of ``lockgate_runs`` must not grow with the line. The steps
waiting in place in their workers are the line's last forty, behind every parked run: a freed slot
finds them (and a step counts them) from their own index, so the rows of ``lockgate_flow_slots``
read do not grow with the parked runs ahead either.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import lockgate as lg
from lockgate.store.sql_files import load_queries

from .pg import pg_database_url

KEY, NOW = "plans", 1_800_000_000.0
SMALL, LARGE = 300, 3_000
HEADS = 21  # how far into its line a decision reads (twice a parallelism of 10, and one)
HELD = 40  # the last of the line wait in place; the runs before them are parked

FILL = [
    """INSERT INTO lockgate_runs (id, workflow, identity, status, payload, created_at, updated_at, progress_at,
        wake_at, owner, epoch, lease_until)
    SELECT 'run_' || i, 'wf', 'run_' || i, 'running', '{}', %(now)s, %(now)s, %(now)s, %(now)s,
        CASE WHEN i > 10 AND i <= %(n)s - %(held)s THEN NULL ELSE 'worker' END, 1,
        CASE WHEN i > 10 AND i <= %(n)s - %(held)s THEN NULL ELSE %(now)s + 60 END
    FROM generate_series(1, %(n)s::int) AS i""",
    """INSERT INTO lockgate_flow_keys (key, rate, period, parallelism, declared, updated_at)
    VALUES (%(key)s, NULL, 1.0, 10, 'd', %(now)s)""",
    """INSERT INTO lockgate_flow_slots (key, run_id, step_key, priority, state, epoch, waiting_since, started_at,
        held_epoch)
    SELECT %(key)s, 'run_' || i, 's#0', 0, CASE WHEN i <= 10 THEN 'running' ELSE 'waiting' END,
        CASE WHEN i <= 10 THEN 1 END, %(now)s + i, CASE WHEN i <= 10 THEN %(now)s END,
        CASE WHEN i > %(n)s - %(held)s THEN 1 END
    FROM generate_series(1, %(n)s::int) AS i""",
]


def _params(n: int) -> dict[str, dict[str, Any]]:
    last = f"run_{n}"
    ahead = {"key": KEY, "run_id": last, "step_key": "s#0", "id": None, "priority": 0, "room": HEADS, "now": NOW}
    return {
        "stepflow_state": {"key": KEY, "now": NOW, "run_id": last, "step_key": "s#0", "cap": HEADS},
        "stepflow_heads": {"key": KEY, "n": HEADS},
        "stepflow_held_heads": {"key": KEY, "n": HEADS, "now": NOW},
        "stepflow_ahead": ahead,
        "stepflow_held_ahead": ahead,
        "stepflow_wake_waiters": {"key": KEY, "n": HEADS, "at": NOW, "now": NOW},
        "stepflow_unhand_starts": {"key": KEY, "run_id": "run_5"},
    }


def _rows_read(node: dict[str, Any], table: str) -> int:
    """Rows of ``table`` the plan's scans read: returned or filtered out, in every loop."""
    read = 0
    if node.get("Relation Name") == table:
        per_loop = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        read += int(per_loop * node.get("Actual Loops", 1))
    return read + sum(_rows_read(child, table) for child in node.get("Plans", []))


def _reads(url: str, n: int) -> dict[str, tuple[int, str]]:
    return {name: (runs, plan) for name, (runs, _, plan) in _plans(url, n).items()}


def _plans(url: str, n: int) -> dict[str, tuple[int, int, str]]:
    """Per statement: the rows of the runs and of the flow slots its plan read, and the plan."""
    queries = load_queries("postgres")
    found: dict[str, tuple[int, int, str]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in FILL:
            conn.execute(statement, {"n": n, "key": KEY, "now": NOW, "held": HELD})
        for name, params in _params(n).items():
            conn.execute("BEGIN")
            try:
                (plan,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries[name], params).fetchone()  # type: ignore[misc]
                text = "\n".join(r[0] for r in conn.execute("EXPLAIN " + queries[name], params).fetchall())
            finally:
                conn.execute("ROLLBACK")
            found[name] = (
                _rows_read(plan[0]["Plan"], "lockgate_runs"),
                _rows_read(plan[0]["Plan"], "lockgate_flow_slots"),
                text,
            )
    return found


@pytest.fixture
def two_databases(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    small = pg_database_url(request)
    large = pg_database_url(request)
    try:
        yield next(small), next(large)
    finally:
        for gen in (small, large):
            gen.close()


async def test_a_line_reads_its_runs_by_id_without_statistics(two_databases: tuple[str, str]) -> None:
    for url in two_databases:
        async with lg.Client(lg.App(), url):  # migrated (and never analyzed)
            pass
    small, large = _reads(two_databases[0], SMALL), _reads(two_databases[1], LARGE)
    for name, (read, plan) in large.items():
        assert read <= max(3 * small[name][0], 4 * HEADS), (name, small[name][0], read, plan)
        assert read <= 4 * HEADS, (name, read, plan)


async def test_the_steps_waiting_in_place_are_found_past_the_parked_runs(two_databases: tuple[str, str]) -> None:
    for url in two_databases:
        async with lg.Client(lg.App(), url):
            pass
    small, large = _plans(two_databases[0], SMALL), _plans(two_databases[1], LARGE)
    for name in ("stepflow_held_heads", "stepflow_held_ahead", "stepflow_state"):
        runs, slots, plan = large[name]
        assert slots <= 4 * HEADS and runs <= 4 * HEADS, (name, small[name][:2], runs, slots, plan)
        assert "lockgate_flow_slots_held" in plan, (name, plan)


async def test_a_parking_run_takes_back_its_handed_starts_by_its_own_slots(two_databases: tuple[str, str]) -> None:
    """A run parking before its handed step ran deletes that grant's start: it reads the key's running
    slots (at most its parallelism) or the run's own, never the line waiting behind them."""
    for url in two_databases:
        async with lg.Client(lg.App(), url):
            pass
    small, large = _plans(two_databases[0], SMALL), _plans(two_databases[1], LARGE)
    runs, slots, plan = large["stepflow_unhand_starts"]
    before = small["stepflow_unhand_starts"][1]
    assert runs == 0 and slots == before <= 10, (before, slots, plan)
