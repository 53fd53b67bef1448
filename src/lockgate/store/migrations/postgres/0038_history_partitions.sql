-- Time-partitioned history (docs/history.md): lockgate_journal, lockgate_step_attempts and
-- lockgate_run_events become tables partitioned by range of run id (a run id begins with its creation
-- time). Each table as it was becomes the first partition (<table>_p0), for the runs created before this
-- migration; <table>_kept is the default partition: rows of runs created where no partition is made yet,
-- and the rows of runs retention keeps when their partition is dropped. The retention sweep makes the
-- partitions ahead (lockgate_history_add) and drops them once past retention (lockgate_history_retire).
-- The window: the tables are locked while each old table is read once (ATTACH checks its rows belong
-- there); its indexes are kept, not rebuilt. SQLite keeps its tables as they are (0038 there is empty).

DO $$
DECLARE
    bound TEXT := lockgate_id_floor('run', (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT);
    top TEXT;
BEGIN
    LOCK TABLE lockgate_journal, lockgate_step_attempts, lockgate_run_events IN ACCESS EXCLUSIVE MODE;
    -- The first partition ends now, or after the newest run id the tables hold if that is later (a host
    -- whose clock ran ahead made it): every row there must belong to it.
    top := greatest((SELECT max(run_id) FROM lockgate_journal), (SELECT max(run_id) FROM lockgate_step_attempts),
                    (SELECT max(run_id) FROM lockgate_run_events));
    IF top >= bound THEN
        bound := lockgate_id_floor('run', lockgate_id_millis(top) + 1);
    END IF;

    -- The journal: its primary key (run_id, step_key) already leads with the partition key.
    ALTER TABLE lockgate_journal RENAME TO lockgate_journal_p0;
    ALTER TABLE lockgate_journal_p0 RENAME CONSTRAINT lockgate_journal_pkey TO lockgate_journal_p0_pkey;
    CREATE TABLE lockgate_journal (LIKE lockgate_journal_p0 INCLUDING DEFAULTS) PARTITION BY RANGE (run_id);
    ALTER TABLE lockgate_journal ADD CONSTRAINT lockgate_journal_pkey PRIMARY KEY (run_id, step_key);
    EXECUTE format('ALTER TABLE lockgate_journal ATTACH PARTITION lockgate_journal_p0 FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    CREATE TABLE lockgate_journal_kept PARTITION OF lockgate_journal DEFAULT;

    -- Step attempts: ids stay unique through the parent's identity (continued from the old table's);
    -- rows are found by (run_id, id), the index each partition has.
    ALTER TABLE lockgate_step_attempts RENAME TO lockgate_step_attempts_p0;
    ALTER INDEX lockgate_step_attempts_run RENAME TO lockgate_step_attempts_p0_run;
    ALTER TABLE lockgate_step_attempts_p0 RENAME CONSTRAINT lockgate_step_attempts_pkey TO lockgate_step_attempts_p0_pkey;
    CREATE TABLE lockgate_step_attempts (LIKE lockgate_step_attempts_p0 INCLUDING DEFAULTS INCLUDING IDENTITY)
        PARTITION BY RANGE (run_id);
    ALTER TABLE lockgate_step_attempts_p0 ALTER COLUMN id DROP IDENTITY;
    PERFORM setval(pg_get_serial_sequence('lockgate_step_attempts', 'id'),
        (SELECT coalesce(max(id), 0) + 1 FROM lockgate_step_attempts_p0), false);
    CREATE INDEX lockgate_step_attempts_run ON lockgate_step_attempts (run_id, id);
    EXECUTE format('ALTER TABLE lockgate_step_attempts ATTACH PARTITION lockgate_step_attempts_p0 FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    CREATE TABLE lockgate_step_attempts_kept PARTITION OF lockgate_step_attempts DEFAULT;

    -- A run's events, the same way.
    ALTER TABLE lockgate_run_events RENAME TO lockgate_run_events_p0;
    ALTER INDEX lockgate_run_events_run RENAME TO lockgate_run_events_p0_run;
    ALTER INDEX lockgate_run_events_type RENAME TO lockgate_run_events_p0_type;
    ALTER TABLE lockgate_run_events_p0 RENAME CONSTRAINT lockgate_run_events_pkey TO lockgate_run_events_p0_pkey;
    CREATE TABLE lockgate_run_events (LIKE lockgate_run_events_p0 INCLUDING DEFAULTS INCLUDING IDENTITY)
        PARTITION BY RANGE (run_id);
    ALTER TABLE lockgate_run_events_p0 ALTER COLUMN id DROP IDENTITY;
    PERFORM setval(pg_get_serial_sequence('lockgate_run_events', 'id'),
        (SELECT coalesce(max(id), 0) + 1 FROM lockgate_run_events_p0), false);
    CREATE INDEX lockgate_run_events_run ON lockgate_run_events (run_id, id);
    CREATE INDEX lockgate_run_events_type ON lockgate_run_events (type, id);
    EXECUTE format('ALTER TABLE lockgate_run_events ATTACH PARTITION lockgate_run_events_p0 FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    CREATE TABLE lockgate_run_events_kept PARTITION OF lockgate_run_events DEFAULT;
END
$$;
