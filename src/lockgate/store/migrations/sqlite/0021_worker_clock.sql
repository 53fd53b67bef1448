-- Each worker's clock offset from the database's at its last heartbeat (seconds). Column for column
-- the same as migrations/postgres/0021_worker_clock.sql; on SQLite every process shares one machine's
-- clock, so it stays 0.
ALTER TABLE lockgate_workers ADD COLUMN clock_offset REAL;
