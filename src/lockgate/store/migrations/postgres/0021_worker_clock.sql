-- Each worker's clock: how far its own clock was from the database's at its last heartbeat
-- (seconds, the worker's minus the database's), shown by `lockgate cluster status`, doctor and /metrics.
ALTER TABLE lockgate_workers ADD COLUMN clock_offset DOUBLE PRECISION;
