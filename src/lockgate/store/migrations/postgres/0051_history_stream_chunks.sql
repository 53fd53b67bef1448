-- Time-partitioned history (docs/history.md): lockgate_stream_chunks joins the run history's partitions.
-- A chunk names its run, so the table is partitioned by range of run id as lockgate_journal,
-- lockgate_step_attempts and lockgate_run_events are (0038), with the same partitions: made ahead together
-- (lockgate_history_add), a retired one's kept rows moved to the default partition and dropped together
-- (lockgate_history_retire). lockgate_history_tables() names the tables both functions manage, once.
--
-- The table is rebuilt, not attached (its rows belong to every partition the journal has, not to a first
-- one): the window is one copy of the stream chunks under an exclusive lock, while the history's partitions
-- are held still. Appending chunks waits for it; nothing fails. SQLite keeps its table (0051 there is empty).

CREATE FUNCTION lockgate_history_tables() RETURNS TEXT[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY['lockgate_journal', 'lockgate_step_attempts', 'lockgate_run_events', 'lockgate_stream_chunks']
$$;

DO $$
DECLARE
    part RECORD;
BEGIN
    -- No partition is made or dropped meanwhile (both take these tables' locks), no chunk is appended.
    LOCK TABLE lockgate_journal, lockgate_step_attempts, lockgate_run_events IN SHARE UPDATE EXCLUSIVE MODE;
    LOCK TABLE lockgate_stream_chunks IN ACCESS EXCLUSIVE MODE;
    ALTER TABLE lockgate_stream_chunks RENAME TO lockgate_stream_chunks_old;
    ALTER INDEX lockgate_stream_chunks_seq RENAME TO lockgate_stream_chunks_old_seq;
    ALTER TABLE lockgate_stream_chunks_old RENAME CONSTRAINT lockgate_stream_chunks_pkey TO lockgate_stream_chunks_old_pkey;
    CREATE TABLE lockgate_stream_chunks (LIKE lockgate_stream_chunks_old INCLUDING DEFAULTS INCLUDING IDENTITY)
        PARTITION BY RANGE (run_id);
    -- The key is (id, run_id), the partition key in it: readers of every run's new chunks (stream_tail)
    -- follow the id, by each partition's index on it. A chunk is one (run, topic, seq), as before.
    ALTER TABLE lockgate_stream_chunks ADD CONSTRAINT lockgate_stream_chunks_pkey PRIMARY KEY (id, run_id);
    CREATE UNIQUE INDEX lockgate_stream_chunks_seq ON lockgate_stream_chunks (run_id, topic, seq);
    -- The journal's partitions, bound for bound and suffix for suffix (the default one too).
    FOR part IN
        SELECT substr(c.relname, length('lockgate_journal_') + 1) AS suffix, pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'lockgate_journal'::regclass
    LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF lockgate_stream_chunks %s',
            'lockgate_stream_chunks_' || part.suffix, part.bound);
    END LOOP;
    INSERT INTO lockgate_stream_chunks SELECT * FROM lockgate_stream_chunks_old ORDER BY run_id, topic, seq;
    PERFORM setval(pg_get_serial_sequence('lockgate_stream_chunks', 'id'),
        (SELECT coalesce(max(id), 0) + 1 FROM lockgate_stream_chunks_old), false);
    DROP TABLE lockgate_stream_chunks_old;
END
$$;

-- 0037's functions, over lockgate_history_tables(): same signatures and answers.
CREATE OR REPLACE FUNCTION lockgate_history_add(lo_ms BIGINT, hi_ms BIGINT, suffix TEXT, lock_wait TEXT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    t TEXT;
    made INTEGER := 0;
    previous TEXT := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', lock_wait, true);
    FOREACH t IN ARRAY lockgate_history_tables() LOOP
        IF to_regclass(t || '_' || suffix) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                t || '_' || suffix, t, lockgate_id_floor('run', lo_ms), lockgate_id_floor('run', hi_ms));
            made := made + 1;
        END IF;
    END LOOP;
    PERFORM set_config('lock_timeout', previous, true);
    RETURN made;
END
$$;

-- 0039's: the runs left in the range are kept, their rows of every table moved to its default partition.
CREATE OR REPLACE FUNCTION lockgate_history_retire(suffix TEXT, lo TEXT, hi TEXT, cutoff DOUBLE PRECISION,
                                                   lock_wait TEXT)
RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    t TEXT;
    cols TEXT;
    keep TEXT[];
    floor TEXT := coalesce(lo, lockgate_id_floor('run', 0));
    previous TEXT := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', lock_wait, true);
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE',
        (SELECT string_agg(quote_ident(x), ', ') FROM unnest(lockgate_history_tables()) AS x));
    -- Under the lock, so that no run of the range is missed; ``cutoff`` judged them before (the caller).
    keep := ARRAY(SELECT r.id FROM lockgate_runs r WHERE r.id >= floor AND r.id < hi);
    FOREACH t IN ARRAY lockgate_history_tables() LOOP
        CONTINUE WHEN to_regclass(t || '_' || suffix) IS NULL;
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', t, t || '_' || suffix);
        IF cardinality(keep) > 0 THEN
            SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
            FROM pg_attribute WHERE attrelid = t::regclass AND attnum > 0 AND NOT attisdropped;
            EXECUTE format('INSERT INTO %I (%s) SELECT %s FROM %I WHERE run_id = ANY ($1)',
                t, cols, cols, t || '_' || suffix) USING keep;
        END IF;
        EXECUTE format('DROP TABLE %I', t || '_' || suffix);
    END LOOP;
    PERFORM set_config('lock_timeout', previous, true);
    RETURN cardinality(keep);
END
$$;
