-- flow() counted parked starts with a GROUP BY over every parked row (a second at a million parked);
-- they are counted here instead, per workflow, mode, key and source, as lockgate_flow_counts counts
-- the ledger (migration 0006). Table for table the same as migrations/sqlite/0018_pending_counts.sql.
CREATE TABLE lockgate_pending_counts (
    workflow TEXT NOT NULL,
    mode     TEXT NOT NULL,
    key      TEXT NOT NULL,                     -- the hold key, '' for none
    source   TEXT NOT NULL,                     -- where the starts came from, '' for unknown
    part     INTEGER NOT NULL,                  -- which writer's share (see lockgate_count_pending)
    n        BIGINT NOT NULL,                   -- a share may go below 0 (parked by one writer, drained by another)
    PRIMARY KEY (workflow, mode, key, source, part)
);

-- Each statement that parks, moves or removes rows adds its change per group to a part of its own,
-- chosen as lockgate_count_ledger chooses (the same 16 advisory locks: a transaction that counted its
-- ledger rows counts its parked rows in the same part), so writers never wait for one another's rows.
-- A share that comes back to 0 is removed: the table holds the groups with something parked.
CREATE FUNCTION lockgate_count_pending() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    mine integer := 0;
    moved jsonb;
    emptied jsonb;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT jsonb_agg(jsonb_build_array(workflow, mode, key, source, d)) INTO moved FROM (
            SELECT workflow, mode, COALESCE(hold_key, '') AS key, COALESCE(source, '') AS source, COUNT(*) AS d
            FROM added GROUP BY 1, 2, 3, 4
        ) AS g;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT jsonb_agg(jsonb_build_array(workflow, mode, key, source, d)) INTO moved FROM (
            SELECT workflow, mode, COALESCE(hold_key, '') AS key, COALESCE(source, '') AS source, -COUNT(*) AS d
            FROM removed GROUP BY 1, 2, 3, 4
        ) AS g;
    ELSE  -- only a row that changed group counts (not a fold, a new payload or due time)
        SELECT jsonb_agg(jsonb_build_array(workflow, mode, key, source, d)) INTO moved FROM (
            SELECT workflow, mode, key, source, SUM(d) AS d FROM (
                SELECT workflow, mode, COALESCE(hold_key, '') AS key, COALESCE(source, '') AS source, 1 AS d FROM added
                UNION ALL
                SELECT workflow, mode, COALESCE(hold_key, ''), COALESCE(source, ''), -1 FROM removed
            ) AS rows GROUP BY 1, 2, 3, 4 HAVING SUM(d) <> 0
        ) AS g;
    END IF;
    IF moved IS NULL THEN
        RETURN NULL;
    END IF;
    WHILE mine < 16 AND NOT pg_try_advisory_xact_lock(1818715747, mine) LOOP  -- 1818715747: 'lgfc'
        mine := mine + 1;
    END LOOP;
    IF mine = 16 THEN
        mine := 16 + pg_backend_pid();
    END IF;
    WITH counted AS (
        INSERT INTO lockgate_pending_counts AS c (workflow, mode, key, source, part, n)
        SELECT m ->> 0, m ->> 1, m ->> 2, m ->> 3, mine, (m ->> 4)::bigint FROM jsonb_array_elements(moved) AS m
        ON CONFLICT (workflow, mode, key, source, part) DO UPDATE SET n = c.n + EXCLUDED.n
        RETURNING c.workflow, c.mode, c.key, c.source, c.n
    )
    SELECT jsonb_agg(jsonb_build_array(workflow, mode, key, source)) INTO emptied FROM counted WHERE n = 0;
    IF emptied IS NOT NULL THEN
        DELETE FROM lockgate_pending_counts
        WHERE part = mine AND n = 0
            AND (workflow, mode, key, source) IN (SELECT e ->> 0, e ->> 1, e ->> 2, e ->> 3 FROM jsonb_array_elements(emptied) AS e);
    END IF;
    RETURN NULL;
END
$$;

-- Writes under way finish first (their rows are counted below); later ones wait, then fire the triggers.
LOCK TABLE lockgate_pending IN SHARE ROW EXCLUSIVE MODE;
CREATE TRIGGER lockgate_pending_count_in AFTER INSERT ON lockgate_pending REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION lockgate_count_pending();
CREATE TRIGGER lockgate_pending_count_out AFTER DELETE ON lockgate_pending REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION lockgate_count_pending();
CREATE TRIGGER lockgate_pending_count_moved AFTER UPDATE ON lockgate_pending
    REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION lockgate_count_pending();

INSERT INTO lockgate_pending_counts (workflow, mode, key, source, part, n)
SELECT workflow, mode, COALESCE(hold_key, ''), COALESCE(source, ''), 0, COUNT(*) FROM lockgate_pending
GROUP BY 1, 2, 3, 4;

-- The oldest parked start of each counted group: one index probe per group. It takes the place of
-- lockgate_pending_workflow (workflow, mode, priority DESC, seq), whose readers (a paused workflow's
-- rows, a cancel's, a parked start's position) each read all of a workflow's rows in a mode anyway,
-- so a parked row is kept in as many indexes as before.
CREATE INDEX lockgate_pending_flow ON lockgate_pending (workflow, mode, COALESCE(hold_key, ''), COALESCE(source, ''), first_at);
DROP INDEX lockgate_pending_workflow;
