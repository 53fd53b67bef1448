-- What a read store is checked and measured with (store/standby.py). SQLite has no standby:
-- a file is its own primary, so these answer as a primary would. Kept in lockstep with
-- sql/postgres/standby.sql.

-- name: standby_server
SELECT 0 AS in_recovery, NULL AS system_id, 'main' AS database_name, 'main' AS schema_name;

-- name: standby_replay
SELECT NULL AS replay_lsn, NULL AS replayed_at, (julianday('now') - 2440587.5) * 86400.0 AS now;

-- name: standby_behind
SELECT NULL AS primary_lsn, 0.0 * length(:replay_lsn) AS behind;
