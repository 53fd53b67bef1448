-- flow() counted parked starts with a GROUP BY over every parked row (a second at a million parked);
-- they are counted here instead, per workflow, mode, key and source, as lockgate_flow_counts counts
-- the ledger (migration 0006). Table for table the same as migrations/postgres/0018_pending_counts.sql,
-- where writers in several processes count apart; here one writer at a time counts, in part 0, row by
-- row as the triggers below see them. A group that comes back to 0 is removed.
CREATE TABLE lockgate_pending_counts (
    workflow TEXT NOT NULL,
    mode     TEXT NOT NULL,
    key      TEXT NOT NULL,                     -- the hold key, '' for none
    source   TEXT NOT NULL,                     -- where the starts came from, '' for unknown
    part     INTEGER NOT NULL,                  -- PostgreSQL writers count apart (one part each); here 0
    n        INTEGER NOT NULL,
    PRIMARY KEY (workflow, mode, key, source, part)
) WITHOUT ROWID;

CREATE TRIGGER lockgate_pending_count_in AFTER INSERT ON lockgate_pending BEGIN
    INSERT INTO lockgate_pending_counts (workflow, mode, key, source, part, n)
    VALUES (NEW.workflow, NEW.mode, COALESCE(NEW.hold_key, ''), COALESCE(NEW.source, ''), 0, 1)
    ON CONFLICT (workflow, mode, key, source, part) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER lockgate_pending_count_out AFTER DELETE ON lockgate_pending BEGIN
    UPDATE lockgate_pending_counts SET n = n - 1
    WHERE workflow = OLD.workflow AND mode = OLD.mode AND key = COALESCE(OLD.hold_key, '')
        AND source = COALESCE(OLD.source, '') AND part = 0;
    DELETE FROM lockgate_pending_counts
    WHERE workflow = OLD.workflow AND mode = OLD.mode AND key = COALESCE(OLD.hold_key, '')
        AND source = COALESCE(OLD.source, '') AND part = 0 AND n = 0;
END;

-- Only a row that changes group counts (not a fold, a new payload or due time).
CREATE TRIGGER lockgate_pending_count_moved AFTER UPDATE OF workflow, mode, hold_key, source ON lockgate_pending
WHEN OLD.workflow IS NOT NEW.workflow OR OLD.mode IS NOT NEW.mode
    OR COALESCE(OLD.hold_key, '') IS NOT COALESCE(NEW.hold_key, '') OR COALESCE(OLD.source, '') IS NOT COALESCE(NEW.source, '')
BEGIN
    UPDATE lockgate_pending_counts SET n = n - 1
    WHERE workflow = OLD.workflow AND mode = OLD.mode AND key = COALESCE(OLD.hold_key, '')
        AND source = COALESCE(OLD.source, '') AND part = 0;
    DELETE FROM lockgate_pending_counts
    WHERE workflow = OLD.workflow AND mode = OLD.mode AND key = COALESCE(OLD.hold_key, '')
        AND source = COALESCE(OLD.source, '') AND part = 0 AND n = 0;
    INSERT INTO lockgate_pending_counts (workflow, mode, key, source, part, n)
    VALUES (NEW.workflow, NEW.mode, COALESCE(NEW.hold_key, ''), COALESCE(NEW.source, ''), 0, 1)
    ON CONFLICT (workflow, mode, key, source, part) DO UPDATE SET n = n + 1;
END;

INSERT INTO lockgate_pending_counts (workflow, mode, key, source, part, n)
SELECT workflow, mode, COALESCE(hold_key, ''), COALESCE(source, ''), 0, COUNT(*) FROM lockgate_pending
WHERE true GROUP BY 1, 2, 3, 4;

-- The oldest parked start of each counted group: one index probe per group. It takes the place of
-- lockgate_pending_workflow (workflow, mode, priority DESC, seq), whose readers (a paused workflow's
-- rows, a cancel's, a parked start's position) each read all of a workflow's rows in a mode anyway,
-- so a parked row is kept in as many indexes as before.
CREATE INDEX lockgate_pending_flow ON lockgate_pending (workflow, mode, COALESCE(hold_key, ''), COALESCE(source, ''), first_at);
DROP INDEX lockgate_pending_workflow;
