"""The bulk fill of ``bench.history``: ended runs and their records, loaded straight into the tables.

Each call adds runs ``first + 1 .. first + count`` (their number within a day) to each of ``days`` days,
the rows the same whatever the way (a run, three journal entries, an attempt, three events, a ledger row,
two stream chunks). Loading them through every index and the per-row count trigger cost about 1.2 ms a
run on a loaded machine (a million in 1,238 s), too slow for ten million; so the fill:

- drops the indexes of ``lockgate_runs``, the ledger and the history tables (unique and primary keys
  too: they are rebuilt, so a duplicate would still fail), as the catalog lists them, and builds them
  again after the last day under the same names, a sort each instead of an insert per row into each;
- disables the user triggers of ``lockgate_runs`` (the run count trigger of migration 0040: the others
  fire only for running runs) and appends what it would have appended, one row per workflow a day
  (``n`` runs, the newest ``finished_at``), so the counts the sweep folds for ``/metrics`` come out
  exactly as the trigger's would; the ledger's statement trigger (its flow counts) stays;
- generates a day's ids once into a temporary table, then one ``INSERT ... SELECT`` a table reads it;
- commits the fill's statements without waiting for the WAL flush (``synchronous_commit = off`` in its
  own session only), then one ``VACUUM ANALYZE``.
"""

from __future__ import annotations

import time

import psycopg

DAY_MS = 86_400_000
TABLES = (
    "lockgate_runs",
    "lockgate_ledger",
    "lockgate_journal",
    "lockgate_step_attempts",
    "lockgate_run_events",
    "lockgate_stream_chunks",
)

# Each index of the tables on the table itself (on a partitioned table, the partitioned index: dropping it
# drops every partition's), and the constraint it backs, if any.
_INDEXES = """
SELECT t.relname, i.relname, pg_get_indexdef(i.oid), c.conname, pg_get_constraintdef(c.oid)
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
LEFT JOIN pg_constraint c ON c.conindid = i.oid AND c.conrelid = t.oid AND c.contype IN ('p', 'u', 'x')
WHERE t.relname = ANY (%s) AND t.relnamespace = 'public'::regnamespace
ORDER BY t.relname, i.relname
"""

# Each partition's index of those: built again from the table's, it takes a name of PostgreSQL's choosing,
# renamed back (a migration that made a partition of an existing table named its indexes itself).
_PARTITION_INDEXES = """
SELECT p.relname, t.relname, c.relname
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
JOIN pg_index x ON x.indexrelid = c.oid
JOIN pg_class t ON t.oid = x.indrelid
WHERE p.relname = ANY (%s) AND p.relkind = 'I'
"""

_RUNS = (
    "INSERT INTO lockgate_runs (id, workflow, identity, status, payload, output, ticket, created_at,"
    " updated_at, progress_at, finished_at) SELECT id, workflow, id, 'succeeded', '{\"order\": ' || g ||"
    " ', \"tenant\": \"t' || g % 100 || '\"}', '42', 'tkt_' || substr(id, 5), at, at + 2, at + 2, at + 2"
    " FROM fill_day"
)
_RECORDS = (
    "INSERT INTO lockgate_journal (run_id, step_key, seq, kind, status, output, attempts, started_at,"
    " finished_at) SELECT id, k.key, k.seq, k.kind, 'completed', '{\"ok\": true}', 1, at, at + 1"
    " FROM fill_day, (VALUES ('charge#0', 0, 'step'), ('nap#0', 1, 'timer'), ('receipt#0', 2, 'step'))"
    " AS k(key, seq, kind)",
    "INSERT INTO lockgate_step_attempts (run_id, step_key, attempt, status, input, started_at,"
    " finished_at) SELECT id, 'charge#0', 1, 'completed', '{\"amount\": 100}', at, at + 1 FROM fill_day",
    "INSERT INTO lockgate_run_events (run_id, type, at, data) SELECT id, e.type, at, NULL"
    " FROM fill_day, (VALUES ('run-started'), ('step-completed'), ('run-succeeded')) AS e(type)",
    "INSERT INTO lockgate_ledger (ticket, kind, workflow, outcome, run_id, at) SELECT 'tkt_' ||"
    " substr(id, 5), 'arrival', workflow, 'admitted', id, at FROM fill_day",
    "INSERT INTO lockgate_stream_chunks (run_id, topic, seq, kind, step_key, attempt, data, size,"
    " created_at) SELECT id, 'default', n, 'chunk', 'charge#0', 1, '\"charged\"', 9, at + 1"
    " FROM fill_day, generate_series(1, 2) n",
)
# What the count trigger appends for each run inserted, summed: the same counts once folded.
_COUNTS = (
    "INSERT INTO lockgate_run_count_changes (workflow, status, n, last_finished)"
    " SELECT workflow, 'succeeded', count(*), max(at + 2) FROM fill_day GROUP BY workflow"
)


def _day(conn: psycopg.Connection, day: int, lo: int, hi: int, step: int) -> None:
    """The day's runs ``lo .. hi``: ids, workflows and times, into ``fill_day`` (temporary, not logged)."""
    conn.execute("DROP TABLE IF EXISTS fill_day")
    conn.execute(
        "CREATE TEMPORARY TABLE fill_day AS"
        f" SELECT left(lockgate_id_floor('run', {day} + (g - 1)::bigint * {step}), 14)"
        f" || lpad(to_hex(g), 14, '0') AS id, g, ({day} + (g - 1)::bigint * {step}) / 1000.0 AS at,"
        " (ARRAY['charge','refund','notify','sync','report'])[g % 5 + 1] AS workflow"
        f" FROM generate_series({lo}, {hi}) g"
    )


def fill(url: str, days: int, first: int, count: int, *, verbose: bool = False) -> None:
    """Runs ``first + 1 .. first + count`` (by their number within a day), spread over ``days`` days."""
    today = int(time.time() * 1000) // DAY_MS * DAY_MS
    started = time.perf_counter()

    def said(what: str) -> None:
        if verbose:
            print(f"  fill: {what} ({time.perf_counter() - started:.0f}s)", flush=True)

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET temp_buffers = '512MB'")
        conn.execute("SET maintenance_work_mem = '1GB'")
        indexes = conn.execute(_INDEXES, (list(TABLES),)).fetchall()
        names = [str(r[1]) for r in indexes]
        named = {(str(r[0]), str(r[1])): str(r[2]) for r in conn.execute(_PARTITION_INDEXES, (names,))}
        triggers = [
            str(r[0])
            for r in conn.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'lockgate_runs'::regclass"
                " AND NOT tgisinternal AND tgenabled = 'O' ORDER BY tgname"
            )
        ]
        counted = "lockgate_runs_count_insert" in triggers
        for name in triggers:
            conn.execute(f"ALTER TABLE lockgate_runs DISABLE TRIGGER {name}")
        for table, index, _, constraint, _ in indexes:
            if constraint:
                conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint}")
            else:
                conn.execute(f"DROP INDEX {index}")
        try:
            for d in range(days):
                day = today - (days - 1 - d) * DAY_MS
                _day(conn, day, first + 1, first + count, DAY_MS // max(first + count, 1))
                for sql in (_RUNS, *_RECORDS, *((_COUNTS,) if counted else ())):
                    conn.execute(sql)
                said(f"day {d + 1} of {days}")
            conn.execute("DROP TABLE IF EXISTS fill_day")
        finally:
            for table, _, definition, constraint, constraint_def in indexes:
                if constraint:
                    conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {constraint} {constraint_def}")
                else:  # a partitioned table's reads ON ONLY: built here on every partition
                    conn.execute(definition.replace(" ON ONLY ", " ON ", 1))
            for parent, table, index in conn.execute(_PARTITION_INDEXES, (names,)).fetchall():
                if named.get((str(parent), str(table)), index) != index:
                    conn.execute(f"ALTER INDEX {index} RENAME TO {named[(str(parent), str(table))]}")
            said("indexes built")
            for name in triggers:
                conn.execute(f"ALTER TABLE lockgate_runs ENABLE TRIGGER {name}")
        conn.execute("VACUUM ANALYZE")
        said("vacuumed")
