-- The partitions by time of domain events, deliveries and schedule firings (store/timed.py; migrations
-- 0053-0055; docs/history.md). Kept in lockstep with sql/sqlite/timed.sql, where nothing is partitioned.

-- name: timed_partitions
-- Each partition of %(table)s with its bounds as the catalog states them (times, in epoch seconds).
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass(%(table)s::text)
ORDER BY c.relname;

-- name: timed_retire
-- A partition of %(table)s past its retention: the rows that outlive it moved to the default partition, then
-- dropped (lockgate_timed_retire, migration 0053), waiting at most %(lock_wait)s for the table's lock.
SELECT lockgate_timed_retire(%(table)s::text, %(suffix)s::text, %(cutoff)s::double precision,
    %(lock_wait)s::text) AS moved;
