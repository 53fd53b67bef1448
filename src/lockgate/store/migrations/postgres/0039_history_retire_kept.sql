-- Retention by partition (docs/history.md): the runs of a retired partition's range that retention no longer
-- keeps are forgotten by range of run id just before it (store/history.py retire, in the same transaction),
-- so the runs left in that range are the ones kept. lockgate_history_retire keeps them all, read by the
-- primary key's range, instead of judging each run again (a judgement whose check of a parent could read
-- every run). Same signature and answer as 0037's.

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
    LOCK TABLE lockgate_journal, lockgate_step_attempts, lockgate_run_events IN ACCESS EXCLUSIVE MODE;
    -- Under the lock, so that no run of the range is missed; ``cutoff`` judged them before (the caller).
    keep := ARRAY(SELECT r.id FROM lockgate_runs r WHERE r.id >= floor AND r.id < hi);
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
