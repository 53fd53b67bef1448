-- The partitions of the run history (store/history.py; docs/history.md). lockgate_journal,
-- lockgate_step_attempts, lockgate_run_events (migration 0038) and lockgate_stream_chunks (0051) are
-- partitioned alike, the tables lockgate_history_tables() names: the journal's partitions stand for all. Kept in lockstep with sql/sqlite/history.sql, where nothing is partitioned.

-- name: history_partitions
-- Each partition with its bounds as the catalog states them: FOR VALUES FROM (...) TO (...), or DEFAULT.
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass('lockgate_journal')
ORDER BY c.relname;

-- name: history_kept_last
-- The newest run id the default partitions hold: a partition made ahead must begin after it.
SELECT greatest(
    (SELECT max(run_id) FROM lockgate_journal_kept),
    (SELECT max(run_id) FROM lockgate_step_attempts_kept),
    (SELECT max(run_id) FROM lockgate_run_events_kept),
    (SELECT max(run_id) FROM lockgate_stream_chunks_kept)
) AS run_id;

-- name: history_add
-- Both functions (migrations 0037, 0051) take the tables' locks for a moment, waiting at most %(lock_wait)s.
SELECT lockgate_history_add(%(lo_ms)s::bigint, %(hi_ms)s::bigint, %(suffix)s::text, %(lock_wait)s::text) AS made;

-- name: history_retire
-- Last, in a commit of its own, the rows of the runs left in the range (those retention keeps) move to the
-- default partition and the partitions are dropped (migrations 0039, 0051: it keeps every run left in the
-- range).
SELECT lockgate_history_retire(%(suffix)s::text, %(lo)s::text, %(hi)s::text, %(cutoff)s::double precision,
    %(lock_wait)s::text) AS kept;

-- name: history_forget_runs
-- Retiring a partition, first (store/history.py forget_range, a slice of its range per commit): the runs of
-- [%(lo)s, %(hi)s) that ended before %(cutoff)s, but a child whose parent is live (it may yet wait for it),
-- read by the primary key's range: no selection of everything expired, one by one. A row changed meanwhile
-- is checked again.
WITH gone AS (
    DELETE FROM lockgate_runs r
    WHERE r.id >= %(lo)s AND r.id < %(hi)s
      AND r.status IN ('succeeded', 'failed', 'cancelled') AND r.finished_at < %(cutoff)s
      -- a parent's status read by its id (a correlated subquery: never a hash over every live run)
      AND (r.parent_id IS NULL OR coalesce(
          (SELECT p.status FROM lockgate_runs p WHERE p.id = r.parent_id), 'gone'
      ) IN ('succeeded', 'failed', 'cancelled', 'gone'))
    RETURNING 1
)
SELECT count(*) AS forgotten FROM gone;

-- name: history_forget_records
-- Then their records, by each table's index on run_id: the rows of the range whose run is gone (a run and
-- its records commit together, so a record seen has its run seen; a run kept keeps them). The runs are
-- looked for in the range too, so that no plan reads them all. Their stream chunks go with the partition.
WITH messages AS (
    DELETE FROM lockgate_messages m WHERE m.run_id >= %(lo)s AND m.run_id < %(hi)s
      AND NOT EXISTS (SELECT 1 FROM lockgate_runs r WHERE r.id = m.run_id
          AND r.id >= %(lo)s AND r.id < %(hi)s) RETURNING 1
), slots AS (
    DELETE FROM lockgate_flow_slots s WHERE s.run_id >= %(lo)s AND s.run_id < %(hi)s
      AND NOT EXISTS (SELECT 1 FROM lockgate_runs r WHERE r.id = s.run_id
          AND r.id >= %(lo)s AND r.id < %(hi)s) RETURNING 1
), tokens AS (
    DELETE FROM lockgate_callback_tokens t WHERE t.run_id >= %(lo)s AND t.run_id < %(hi)s
      AND NOT EXISTS (SELECT 1 FROM lockgate_runs r WHERE r.id = t.run_id
          AND r.id >= %(lo)s AND r.id < %(hi)s) RETURNING 1
)
SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM slots) + (SELECT count(*) FROM tokens)
    AS records;

-- name: ledger_partitions
-- The ledger's partitions (migration 0052: by range of its time, at, with the run history's intervals and
-- suffixes), as history_partitions states the run history's.
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass('lockgate_ledger')
ORDER BY c.relname;

-- name: ledger_kept_last
-- The newest decision the ledger's default partition holds: a partition made ahead must begin after it.
SELECT max(at) AS at FROM lockgate_ledger_kept;

-- name: ledger_drop
-- A ledger partition past retention, dropped whole (waiting at most %(lock_wait)s for the ledger's lock).
SELECT lockgate_ledger_drop(%(suffix)s::text, %(lock_wait)s::text) AS dropped;
