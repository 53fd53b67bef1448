-- SQLite keeps its run history unpartitioned (docs/history.md): there are no partitions to list, make or
-- drop, and retention deletes (sql/sqlite/retention.sql). Kept in lockstep with sql/postgres/history.sql.

-- name: history_partitions
SELECT NULL AS name, NULL AS bound WHERE 0;

-- name: history_kept_last
SELECT NULL AS run_id;

-- name: history_add
SELECT 0 AS made, :lo_ms AS lo_ms, :hi_ms AS hi_ms, :suffix AS suffix, :lock_wait AS lock_wait;

-- name: history_retire
SELECT 0 AS kept, :suffix AS suffix, :lo AS lo, :hi AS hi, :cutoff AS cutoff,
    :lock_wait AS lock_wait;

-- name: history_forget_runs
SELECT 0 AS forgotten, :lo AS lo, :hi AS hi, :cutoff AS cutoff;

-- name: history_forget_records
SELECT 0 AS records, :lo AS lo, :hi AS hi;

-- name: ledger_partitions
SELECT NULL AS name, NULL AS bound WHERE 0;

-- name: ledger_kept_last
SELECT NULL AS at;

-- name: ledger_drop
SELECT 0 AS dropped, :suffix AS suffix, :lock_wait AS lock_wait;
