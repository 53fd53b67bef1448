-- Time-partitioned history (docs/history.md): the functions the retention sweep manages the partitions of
-- lockgate_journal, lockgate_step_attempts and lockgate_run_events with (0038 converts those tables).
-- They are partitioned by range of run id: a run id begins with its creation time (ids.py), so each
-- partition holds the history of the runs created in one interval, and every statement about one run
-- reads and writes one partition.

-- The smallest id with ``prefix`` made at ``millis`` (ids.py: 48 bits of milliseconds then randomness,
-- in base32 extended hex): the bound of a partition that begins then.
CREATE FUNCTION lockgate_id_floor(prefix TEXT, millis BIGINT) RETURNS TEXT
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT prefix || '_' || string_agg(substr('0123456789abcdefghijklmnopqrstuv', (CASE
        WHEN k < 9 THEN (millis >> (43 - 5 * k)) & 31
        WHEN k = 9 THEN (millis & 7) << 2
        ELSE 0 END)::INTEGER + 1, 1), '' ORDER BY k)
    FROM generate_series(0, 23) AS k
$$;

-- When an id was made (epoch milliseconds; NULL for an id not of that form): lockgate_id_floor's inverse.
CREATE FUNCTION lockgate_id_millis(id TEXT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT sum(CASE
        WHEN k < 9 THEN (strpos('0123456789abcdefghijklmnopqrstuv', substr(d, k + 1, 1)) - 1)::BIGINT << (43 - 5 * k)
        ELSE (strpos('0123456789abcdefghijklmnopqrstuv', substr(d, 10, 1)) - 1)::BIGINT >> 2 END)::BIGINT
    FROM substring(id FROM '_([0-9a-v]{24})$') AS d, generate_series(0, 9) AS k
    WHERE d IS NOT NULL
$$;

-- Make the partitions of runs created in [lo_ms, hi_ms) (named <table>_<suffix>) where they do not exist;
-- how many were made. The caller never asks for a range the default partition holds rows of. Waits at
-- most lock_wait for the tables' locks (a sweep's tick that cannot have them fails; the next tries again).
CREATE FUNCTION lockgate_history_add(lo_ms BIGINT, hi_ms BIGINT, suffix TEXT, lock_wait TEXT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    t TEXT;
    made INTEGER := 0;
    previous TEXT := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', lock_wait, true);
    FOREACH t IN ARRAY ARRAY['lockgate_journal', 'lockgate_step_attempts', 'lockgate_run_events'] LOOP
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

-- Retire the partitions <table>_<suffix> of runs with ids in [lo, hi) (lo NULL: from the first): the rows
-- of the runs retention keeps (live, ended at or after the cutoff, or a child whose parent is live) move to
-- the default partition (<table>_kept), then the partitions are dropped. How many runs were kept. The
-- tables are locked for that moment (waiting at most lock_wait).
CREATE FUNCTION lockgate_history_retire(suffix TEXT, lo TEXT, hi TEXT, cutoff DOUBLE PRECISION, lock_wait TEXT)
RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    t TEXT;
    cols TEXT;
    keep TEXT[];
    previous TEXT := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', lock_wait, true);
    LOCK TABLE lockgate_journal, lockgate_step_attempts, lockgate_run_events IN ACCESS EXCLUSIVE MODE;
    keep := ARRAY(
        SELECT r.id FROM lockgate_runs r
        WHERE (lo IS NULL OR r.id >= lo) AND r.id < hi
          AND NOT (r.status IN ('succeeded', 'failed', 'cancelled') AND r.finished_at < cutoff
                   AND NOT EXISTS (SELECT 1 FROM lockgate_runs p
                                   WHERE p.id = r.parent_id AND p.status NOT IN ('succeeded', 'failed', 'cancelled'))));
    FOREACH t IN ARRAY ARRAY['lockgate_journal', 'lockgate_step_attempts', 'lockgate_run_events'] LOOP
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
