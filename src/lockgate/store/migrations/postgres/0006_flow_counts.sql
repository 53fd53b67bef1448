-- flow() read its counts by aggregating the whole ledger on every call; they are kept here instead,
-- per workflow, key and outcome. Table for table the same as migrations/sqlite/0006_flow_counts.sql,
-- where the store folds each group commit's ledger rows at commit (lockgate_flow_counted marks how
-- far); here a trigger counts each statement's rows as they are written and leaves that mark alone.
CREATE TABLE lockgate_flow_counts (
    workflow TEXT NOT NULL,
    key      TEXT NOT NULL,                     -- '' for a decision without a key
    outcome  TEXT NOT NULL,
    part     INTEGER NOT NULL,                  -- which writer's share (see lockgate_count_ledger)
    n        BIGINT NOT NULL,
    PRIMARY KEY (workflow, key, outcome, part)
);

-- SQLite's fold mark; unused here (one row, 0).
CREATE TABLE lockgate_flow_counted (
    upto BIGINT NOT NULL
);
INSERT INTO lockgate_flow_counted (upto) VALUES (0);

-- Writers in other processes may count the same workflow, key and outcome at the same time. So
-- that none waits for another's row (nor deadlocks on two rows taken in opposite orders), each
-- transaction counts into a part of its own: the first of 16 parts whose lock it can take (held
-- until it ends; a writer that holds one already gets it again), else a part named after its
-- session, which no other live session shares. flow() sums the parts.
CREATE FUNCTION lockgate_count_ledger() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    mine integer := 0;
BEGIN
    WHILE mine < 16 AND NOT pg_try_advisory_xact_lock(1818715747, mine) LOOP  -- 1818715747: 'lgfc'
        mine := mine + 1;
    END LOOP;
    IF mine = 16 THEN
        mine := 16 + pg_backend_pid();
    END IF;
    INSERT INTO lockgate_flow_counts AS c (workflow, key, outcome, part, n)
    SELECT workflow, COALESCE(key, ''), outcome, mine, COUNT(*) FROM added
    GROUP BY workflow, COALESCE(key, ''), outcome
    ON CONFLICT (workflow, key, outcome, part) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END
$$;

-- Ledger inserts under way finish first (their rows are counted below); later ones wait, then fire the trigger.
LOCK TABLE lockgate_ledger IN SHARE ROW EXCLUSIVE MODE;
CREATE TRIGGER lockgate_ledger_count AFTER INSERT ON lockgate_ledger REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION lockgate_count_ledger();

INSERT INTO lockgate_flow_counts (workflow, key, outcome, part, n)
SELECT workflow, COALESCE(key, ''), outcome, 0, COUNT(*) FROM lockgate_ledger
GROUP BY workflow, COALESCE(key, ''), outcome;

-- Read by nothing since flow() stopped aggregating the ledger; one index fewer per ledger row.
DROP INDEX lockgate_ledger_workflow;
