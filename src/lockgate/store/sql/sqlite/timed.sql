-- SQLite keeps its tables of domain events, deliveries and schedule firings unpartitioned (docs/history.md):
-- there are no partitions to list or drop, and retention deletes. Kept in lockstep with sql/postgres/timed.sql.

-- name: timed_partitions
SELECT NULL AS name, NULL AS bound, :table AS tbl WHERE 0;

-- name: timed_retire
SELECT NULL AS moved, :table AS tbl, :suffix AS suffix, :cutoff AS cutoff, :lock_wait AS lock_wait;
