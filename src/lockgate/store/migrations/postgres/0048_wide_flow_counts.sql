-- A step flow key's rate, parallelism and burst, and the units a weighted call reserves and settles, up to
-- 2**53 - 1 (lockgate.flowcontrol.MAX_COUNT): tokens per minute of a large provider account pass 2**31.
ALTER TABLE lockgate_flow_keys ALTER COLUMN rate TYPE BIGINT, ALTER COLUMN parallelism TYPE BIGINT,
    ALTER COLUMN burst TYPE BIGINT;
ALTER TABLE lockgate_flow_starts ALTER COLUMN units TYPE BIGINT, ALTER COLUMN settled TYPE BIGINT;
ALTER TABLE lockgate_flow_slots ALTER COLUMN units TYPE BIGINT;
