-- The partitions of the run history (store/history.py; docs/history.md). lockgate_journal,
-- lockgate_step_attempts and lockgate_run_events are partitioned alike (migration 0038): the journal's
-- partitions stand for all three. Kept in lockstep with sql/sqlite/history.sql, where nothing is partitioned.

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
    (SELECT max(run_id) FROM lockgate_run_events_kept)
) AS run_id;

-- name: history_add
-- Both functions (migration 0037) take the three tables' locks for a moment, waiting at most %(lock_wait)s.
SELECT lockgate_history_add(%(lo_ms)s::bigint, %(hi_ms)s::bigint, %(suffix)s::text, %(lock_wait)s::text) AS made;

-- name: history_retire
SELECT lockgate_history_retire(%(suffix)s::text, %(lo)s::text, %(hi)s::text, %(cutoff)s::double precision,
    %(lock_wait)s::text) AS kept;
