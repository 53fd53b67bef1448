-- Time-partitioned schedule firings (docs/history.md): lockgate_schedule_firings by range of scheduled_at,
-- with the run history's intervals and suffixes. The unique claim (schedule, scheduled_at, manual) that makes
-- a slot fire once already holds the partition key: a slot's claim is checked within its partition. The key
-- becomes (id, scheduled_at); ids still come from one sequence. The retention sweep drops the partitions past
-- retention, a firing still claimed, buffered or started (or one claimed since the cutoff: a backfill of old
-- slots) moved to the default partition first.
--
-- The table as it is becomes its first partition (_p0, bound at now, or past its newest slot), attached; its
-- key index is built again with scheduled_at in it: the window is one index build over the firings under an
-- exclusive lock (claims wait; none fails). SQLite keeps its table (0055 there is empty).

DO $$
DECLARE
    bound DOUBLE PRECISION := extract(epoch FROM clock_timestamp());
BEGIN
    LOCK TABLE lockgate_journal IN SHARE UPDATE EXCLUSIVE MODE;
    LOCK TABLE lockgate_schedule_firings IN ACCESS EXCLUSIVE MODE;
    bound := greatest(bound, (SELECT max(scheduled_at) + 0.001 FROM lockgate_schedule_firings));

    ALTER TABLE lockgate_schedule_firings RENAME TO lockgate_schedule_firings_p0;
    ALTER TABLE lockgate_schedule_firings_p0 DROP CONSTRAINT lockgate_schedule_firings_pkey;
    ALTER TABLE lockgate_schedule_firings_p0
        RENAME CONSTRAINT lockgate_schedule_firings_schedule_scheduled_at_manual_key
        TO lockgate_schedule_firings_p0_claim;
    ALTER INDEX lockgate_schedule_firings_live RENAME TO lockgate_schedule_firings_p0_live;
    ALTER INDEX lockgate_schedule_firings_recent RENAME TO lockgate_schedule_firings_p0_recent;
    ALTER INDEX lockgate_schedule_firings_claimed RENAME TO lockgate_schedule_firings_p0_claimed;
    CREATE TABLE lockgate_schedule_firings (LIKE lockgate_schedule_firings_p0 INCLUDING DEFAULTS INCLUDING IDENTITY)
        PARTITION BY RANGE (scheduled_at);
    ALTER TABLE lockgate_schedule_firings_p0 ALTER COLUMN id DROP IDENTITY;
    PERFORM setval(pg_get_serial_sequence('lockgate_schedule_firings', 'id'),
        (SELECT coalesce(max(id), 0) + 1 FROM lockgate_schedule_firings_p0), false);
    ALTER TABLE lockgate_schedule_firings ADD CONSTRAINT lockgate_schedule_firings_pkey PRIMARY KEY (id, scheduled_at);
    ALTER TABLE lockgate_schedule_firings ADD CONSTRAINT lockgate_schedule_firings_claim
        UNIQUE (schedule, scheduled_at, manual);
    CREATE INDEX lockgate_schedule_firings_live ON lockgate_schedule_firings (schedule, scheduled_at)
        WHERE status IN ('claimed', 'buffered', 'started');
    CREATE INDEX lockgate_schedule_firings_recent ON lockgate_schedule_firings (schedule, id);
    CREATE INDEX lockgate_schedule_firings_claimed ON lockgate_schedule_firings (claimed_at);
    EXECUTE format('ALTER TABLE lockgate_schedule_firings ATTACH PARTITION lockgate_schedule_firings_p0'
        ' FOR VALUES FROM (MINVALUE) TO (%s)', bound);
    CREATE TABLE lockgate_schedule_firings_kept PARTITION OF lockgate_schedule_firings DEFAULT;

    PERFORM lockgate_timed_catch_up('lockgate_schedule_firings');
END
$$;
