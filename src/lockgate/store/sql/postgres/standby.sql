-- What a read store (a streaming standby of the write store) is checked and measured with
-- (store/standby.py). Kept in lockstep with sql/sqlite/standby.sql.

-- name: standby_server
-- Who the server is: a standby is in recovery, and shares its primary's system identifier.
SELECT pg_is_in_recovery() AS in_recovery,
       (SELECT system_identifier::text FROM pg_control_system()) AS system_id,
       current_database() AS database_name, current_schema() AS schema_name;

-- name: standby_replay
-- On the standby: how far it has replayed the primary's WAL, and when the last transaction it replayed committed.
SELECT pg_last_wal_replay_lsn()::text AS replay_lsn,
       EXTRACT(epoch FROM pg_last_xact_replay_timestamp())::float8 AS replayed_at,
       EXTRACT(epoch FROM clock_timestamp())::float8 AS now;

-- name: standby_behind
-- On the primary: where its WAL ends, and how many bytes of it lie past %(replay_lsn)s.
SELECT pg_current_wal_lsn()::text AS primary_lsn,
       pg_wal_lsn_diff(pg_current_wal_lsn(), CAST(%(replay_lsn)s AS pg_lsn))::float8 AS behind;
