-- Time partitions for the tables of domain events, deliveries and schedule firings (docs/history.md), made by
-- the functions here (0054 and 0055 convert the tables). They are partitioned as the ledger is (0052): by range
-- of their own time, with the run history's intervals and suffixes, <table>_p0 the table as it was,
-- <table>_kept the default partition. Unlike a ledger row, a row of theirs may outlive its partition (a
-- pending delivery, the event it delivers, an unfinished firing): moved to the default partition first.

-- The tables partitioned by time that are partitioned now (the ledger, and those 0054 and 0055 convert).
CREATE FUNCTION lockgate_timed_tables() RETURNS TEXT[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(t ORDER BY o), ARRAY[]::TEXT[])
    FROM unnest(ARRAY['lockgate_ledger', 'lockgate_deliveries', 'lockgate_events', 'lockgate_schedule_firings'])
        WITH ORDINALITY AS n(t, o)
    WHERE (SELECT relkind FROM pg_class WHERE oid = to_regclass(n.t)) = 'p'
$$;

-- Make t's partition <t>_<suffix> of the times [lo_ms, hi_ms) (epoch milliseconds; bounds in seconds), where
-- none is: it begins where a partition reaching into the interval ends (the first ends at the moment of its
-- table's conversion, within an interval the run history has a partition of), none if one covers it. Rows the
-- default partition holds in that range (written where no partition was made yet: a slot backfilled days
-- ahead, an event from a host whose clock ran ahead) move into the new partition, which PostgreSQL would not
-- make over them. Whether one was made.
CREATE FUNCTION lockgate_timed_add(t TEXT, lo_ms BIGINT, hi_ms BIGINT, suffix TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    lo_s NUMERIC;
    col TEXT;
    early BOOLEAN;
BEGIN
    IF to_regclass(t || '_' || suffix) IS NOT NULL THEN
        RETURN false;
    END IF;
    SELECT greatest(lo_ms / 1000.0, max(b.hi)) INTO lo_s
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
        LATERAL (SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']*)''\)')::numeric AS lo,
                        substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)')::numeric AS hi) b
    WHERE i.inhparent = t::regclass
      AND b.hi > lo_ms / 1000.0 AND coalesce(b.lo, lo_ms / 1000.0) < hi_ms / 1000.0;
    IF coalesce(lo_s, lo_ms / 1000.0) >= hi_ms / 1000.0 THEN
        RETURN false;
    END IF;
    lo_s := coalesce(lo_s, lo_ms / 1000.0);
    SELECT a.attname INTO col FROM pg_partitioned_table p
        JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
    WHERE p.partrelid = t::regclass;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE %I >= %s AND %I < %s)',
        t || '_kept', col, lo_s, col, hi_ms / 1000.0) INTO early;
    IF early THEN
        EXECUTE format('CREATE TEMPORARY TABLE lockgate_timed_moving ON COMMIT DROP AS'
            ' WITH moved AS (DELETE FROM %I WHERE %I >= %s AND %I < %s RETURNING *) SELECT * FROM moved',
            t || '_kept', col, lo_s, col, hi_ms / 1000.0);
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%s) TO (%s)',
        t || '_' || suffix, t, lo_s, hi_ms / 1000.0);
    IF early THEN
        EXECUTE format('INSERT INTO %I SELECT * FROM lockgate_timed_moving', t);
        DROP TABLE lockgate_timed_moving;
    END IF;
    RETURN true;
END
$$;

-- 0052's, making every time-partitioned table's partition of the interval with the run history's.
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
    FOREACH t IN ARRAY lockgate_timed_tables() LOOP
        IF lockgate_timed_add(t, lo_ms, hi_ms, suffix) THEN
            made := made + 1;
        END IF;
    END LOOP;
    PERFORM set_config('lock_timeout', previous, true);
    RETURN made;
END
$$;

-- Give a table just converted the partitions the run history has ahead of its first partition's end.
CREATE FUNCTION lockgate_timed_catch_up(t TEXT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    part RECORD;
    made INTEGER := 0;
BEGIN
    FOR part IN
        SELECT substr(c.relname, length('lockgate_journal_') + 1) AS suffix,
               lockgate_id_millis(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']*)''\)')) AS lo_ms,
               lockgate_id_millis(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)')) AS hi_ms
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'lockgate_journal'::regclass
    LOOP
        CONTINUE WHEN part.lo_ms IS NULL OR part.hi_ms IS NULL;
        IF lockgate_timed_add(t, part.lo_ms, part.hi_ms, part.suffix) THEN
            made := made + 1;
        END IF;
    END LOOP;
    RETURN made;
END
$$;

-- Retire t's partition <t>_<suffix> (every row of its interval is past t's retention, ``cutoff``: the caller
-- judged its bound): detach it, move the rows that outlive it into the default partition, drop it; how many rows
-- moved (NULL: no such partition). Those moved: a delivery still pending; an event with a pending delivery (read
-- through the deliveries' partial indexes, then by its key in the partition); a firing claimed, buffered or
-- started, or claimed at or after the cutoff (a backfill of old slots, recorded lately). The ids publishers gave
-- the events dropped are forgotten with them (by lockgate_event_ids' index on occurred_at). Waits at most
-- lock_wait for the table's lock.
CREATE FUNCTION lockgate_timed_retire(t TEXT, suffix TEXT, cutoff DOUBLE PRECISION, lock_wait TEXT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    part TEXT := t || '_' || suffix;
    bound TEXT;
    lo DOUBLE PRECISION;
    hi DOUBLE PRECISION;
    cols TEXT;
    keep TEXT;
    moved INTEGER := 0;
    previous TEXT := current_setting('lock_timeout');
BEGIN
    IF to_regclass(part) IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT pg_get_expr(relpartbound, oid) INTO bound FROM pg_class WHERE oid = part::regclass;
    lo := coalesce(substring(bound FROM 'FROM \(''([^'']*)''\)')::DOUBLE PRECISION, '-infinity');
    hi := substring(bound FROM 'TO \(''([^'']*)''\)')::DOUBLE PRECISION;
    keep := CASE t
        WHEN 'lockgate_deliveries' THEN format('SELECT * FROM %I WHERE status = ''pending''', part)
        WHEN 'lockgate_events' THEN format(
            'SELECT x.* FROM (SELECT DISTINCT event_id, created_at FROM lockgate_deliveries'
            ' WHERE status = ''pending'' AND created_at >= $1 AND created_at < $2) d'
            ' CROSS JOIN LATERAL (SELECT * FROM %I e WHERE e.id = d.event_id AND e.occurred_at = d.created_at) x', part)
        WHEN 'lockgate_schedule_firings' THEN format(
            'SELECT * FROM %I WHERE status IN (''claimed'', ''buffered'', ''started'') OR claimed_at >= $3', part)
        END;
    PERFORM set_config('lock_timeout', lock_wait, true);
    EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', t, part);
    IF keep IS NOT NULL THEN
        SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
        FROM pg_attribute WHERE attrelid = t::regclass AND attnum > 0 AND NOT attisdropped;
        EXECUTE format('INSERT INTO %I (%s) SELECT %s FROM (%s) k', t, cols, cols, keep) USING lo, hi, cutoff;
        GET DIAGNOSTICS moved = ROW_COUNT;
    END IF;
    EXECUTE format('DROP TABLE %I', part);
    IF t = 'lockgate_events' THEN
        DELETE FROM lockgate_event_ids i WHERE i.occurred_at >= lo AND i.occurred_at < hi
            AND NOT EXISTS (SELECT 1 FROM lockgate_events e WHERE e.id = i.id AND e.occurred_at = i.occurred_at);
    END IF;
    PERFORM set_config('lock_timeout', previous, true);
    RETURN moved;
END
$$;
