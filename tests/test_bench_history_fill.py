"""``bench.history``'s bulk fill leaves the store as inserting through every index and trigger would.

It drops the indexes and holds off the run count trigger while it loads (bench/history_fill.py): afterwards
the indexes, constraints and triggers are the ones the migrations made, and the counts ``/metrics`` reads,
once folded, are the runs' own.
"""

from __future__ import annotations

import psycopg
from bench.history_fill import fill

_SCHEMA = """
SELECT 'index', indexrelid::regclass::text, pg_get_indexdef(indexrelid) || ' valid ' || indisvalid::text
FROM pg_index WHERE indrelid::regclass::text LIKE 'lockgate%%'
UNION ALL
SELECT 'constraint', conrelid::regclass::text || '.' || conname, pg_get_constraintdef(oid)
FROM pg_constraint WHERE conrelid::regclass::text LIKE 'lockgate%%'
UNION ALL
SELECT 'trigger', tgrelid::regclass::text || '.' || tgname, tgenabled::text
FROM pg_trigger WHERE NOT tgisinternal
"""
_FOLD = """
WITH moved AS (DELETE FROM lockgate_run_count_changes RETURNING workflow, status, n, last_finished)
INSERT INTO lockgate_run_counts AS c (workflow, status, n, last_finished)
SELECT workflow, status, SUM(n), MAX(last_finished) FROM moved GROUP BY workflow, status
ON CONFLICT (workflow, status) DO UPDATE
SET n = c.n + EXCLUDED.n, last_finished = greatest(c.last_finished, EXCLUDED.last_finished)
"""


def test_the_fill_restores_the_schema_and_keeps_the_counts_exact(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        before = sorted(conn.execute(_SCHEMA).fetchall())
        fill(pg_url, 3, 0, 40)
        fill(pg_url, 3, 40, 60)  # a second size adds to the same days
        assert sorted(conn.execute(_SCHEMA).fetchall()) == before
        conn.execute(_FOLD)
        kept = conn.execute("SELECT workflow, status, n, last_finished FROM lockgate_run_counts").fetchall()
        counted = conn.execute(
            "SELECT workflow, status, count(*), max(finished_at) FROM lockgate_runs GROUP BY workflow, status"
        ).fetchall()
        assert sorted(kept) == sorted(counted)
        assert sum(int(r[2]) for r in counted) == 300
        rows = {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()
            for t in ("lockgate_journal", "lockgate_step_attempts", "lockgate_run_events", "lockgate_stream_chunks")
        }
        assert rows == {
            "lockgate_journal": (900,),
            "lockgate_step_attempts": (300,),
            "lockgate_run_events": (900,),
            "lockgate_stream_chunks": (600,),
        }
        # the ledger's statement trigger stayed: its flow counts hold every decision
        assert conn.execute("SELECT sum(n) FROM lockgate_flow_counts WHERE outcome = 'admitted'").fetchone() == (300,)
