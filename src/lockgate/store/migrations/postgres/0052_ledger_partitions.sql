-- Time-partitioned history (docs/history.md): the ledger (one row per gate decision, the most written of
-- the tables that only grow) is partitioned by range of its time, `at`, with the run history's intervals
-- and suffixes: lockgate_history_add makes its partition of an interval with the run history's, and the
-- retention sweep drops each once its interval is past retention (lockgate_ledger_drop). A ledger row
-- belongs to no run that may outlive retention: a partition past it is dropped whole, nothing moved.
--
-- The ledger as it is becomes the first partition (lockgate_ledger_p0: the decisions before now, or before
-- the newest if a host's clock ran ahead), attached; lockgate_ledger_kept is the default partition (rows
-- written where no partition was made yet). The key becomes (id, at), the partition key in it: the one
-- index built here, over the old ledger, under the exclusive lock that is the window (decisions wait, none
-- fails). flow()'s counts stay as they were: the trigger counting the rows written (0006) moves to the new
-- table. SQLite keeps its ledger (0052 there is empty).

DO $$
DECLARE
    bound DOUBLE PRECISION := extract(epoch FROM clock_timestamp());
    part RECORD;
BEGIN
    -- No history partition is made or dropped meanwhile (lockgate_history_add takes this lock's betters).
    LOCK TABLE lockgate_journal IN SHARE UPDATE EXCLUSIVE MODE;
    LOCK TABLE lockgate_ledger IN ACCESS EXCLUSIVE MODE;
    bound := greatest(bound, (SELECT max(at) + 0.001 FROM lockgate_ledger));

    ALTER TABLE lockgate_ledger RENAME TO lockgate_ledger_p0;
    -- Its key (id) gives way to (id, at), built by the ATTACH below.
    ALTER TABLE lockgate_ledger_p0 DROP CONSTRAINT lockgate_ledger_pkey;
    ALTER INDEX lockgate_ledger_ticket RENAME TO lockgate_ledger_p0_ticket;
    ALTER INDEX lockgate_ledger_pending RENAME TO lockgate_ledger_p0_pending;
    ALTER INDEX lockgate_ledger_at RENAME TO lockgate_ledger_p0_at;
    DROP TRIGGER lockgate_ledger_count ON lockgate_ledger_p0;
    CREATE TABLE lockgate_ledger (LIKE lockgate_ledger_p0 INCLUDING DEFAULTS INCLUDING IDENTITY)
        PARTITION BY RANGE (at);
    ALTER TABLE lockgate_ledger_p0 ALTER COLUMN id DROP IDENTITY;
    PERFORM setval(pg_get_serial_sequence('lockgate_ledger', 'id'),
        (SELECT coalesce(max(id), 0) + 1 FROM lockgate_ledger_p0), false);
    ALTER TABLE lockgate_ledger ADD CONSTRAINT lockgate_ledger_pkey PRIMARY KEY (id, at);
    CREATE INDEX lockgate_ledger_ticket ON lockgate_ledger (ticket);
    CREATE INDEX lockgate_ledger_pending ON lockgate_ledger (pending_id) WHERE pending_id IS NOT NULL;
    CREATE INDEX lockgate_ledger_at ON lockgate_ledger (at);
    EXECUTE format('ALTER TABLE lockgate_ledger ATTACH PARTITION lockgate_ledger_p0 FOR VALUES FROM (MINVALUE) TO (%s)',
        bound);
    CREATE TABLE lockgate_ledger_kept PARTITION OF lockgate_ledger DEFAULT;

    -- The run history's partitions made ahead already, from the first partition's end.
    FOR part IN
        SELECT substr(c.relname, length('lockgate_journal_') + 1) AS suffix,
               lockgate_id_millis(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']*)''\)')) AS lo_ms,
               lockgate_id_millis(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)')) AS hi_ms
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'lockgate_journal'::regclass
    LOOP
        CONTINUE WHEN part.lo_ms IS NULL OR part.hi_ms IS NULL OR part.hi_ms / 1000.0 <= bound;
        EXECUTE format('CREATE TABLE %I PARTITION OF lockgate_ledger FOR VALUES FROM (%s) TO (%s)',
            'lockgate_ledger_' || part.suffix, greatest(part.lo_ms / 1000.0, bound), part.hi_ms / 1000.0);
    END LOOP;

    CREATE TRIGGER lockgate_ledger_count AFTER INSERT ON lockgate_ledger REFERENCING NEW TABLE AS added
        FOR EACH STATEMENT EXECUTE FUNCTION lockgate_count_ledger();
END
$$;

-- 0051's, making the ledger's partition of the interval too (by time: from lo_ms to hi_ms, in seconds).
CREATE OR REPLACE FUNCTION lockgate_history_add(lo_ms BIGINT, hi_ms BIGINT, suffix TEXT, lock_wait TEXT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    t TEXT;
    lo_s NUMERIC;
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
    -- It begins where a partition reaching into the interval ends, if it does (the first ends at the moment
    -- of 0052, within an interval of the run history made before it); none is made if one covers it.
    SELECT greatest(lo_ms / 1000.0, max(b.hi)) INTO lo_s
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
        LATERAL (SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']*)''\)')::numeric AS lo,
                        substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)')::numeric AS hi) b
    WHERE i.inhparent = 'lockgate_ledger'::regclass
      AND b.hi > lo_ms / 1000.0 AND coalesce(b.lo, lo_ms / 1000.0) < hi_ms / 1000.0;
    IF to_regclass('lockgate_ledger_' || suffix) IS NULL AND coalesce(lo_s, lo_ms / 1000.0) < hi_ms / 1000.0 THEN
        EXECUTE format('CREATE TABLE %I PARTITION OF lockgate_ledger FOR VALUES FROM (%s) TO (%s)',
            'lockgate_ledger_' || suffix, coalesce(lo_s, lo_ms / 1000.0), hi_ms / 1000.0);
        made := made + 1;
    END IF;
    PERFORM set_config('lock_timeout', previous, true);
    RETURN made;
END
$$;

-- Drop the ledger's partition lockgate_ledger_<suffix> (every row of it past retention: the caller judged
-- its bound), waiting at most lock_wait for the ledger's lock; whether there was one.
CREATE FUNCTION lockgate_ledger_drop(suffix TEXT, lock_wait TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    previous TEXT := current_setting('lock_timeout');
BEGIN
    IF to_regclass('lockgate_ledger_' || suffix) IS NULL THEN
        RETURN false;
    END IF;
    PERFORM set_config('lock_timeout', lock_wait, true);
    EXECUTE format('ALTER TABLE lockgate_ledger DETACH PARTITION %I', 'lockgate_ledger_' || suffix);
    EXECUTE format('DROP TABLE %I', 'lockgate_ledger_' || suffix);
    PERFORM set_config('lock_timeout', previous, true);
    RETURN true;
END
$$;
