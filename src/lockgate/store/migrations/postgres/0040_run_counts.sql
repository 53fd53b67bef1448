-- /metrics and `lockgate stats` counted the runs by workflow and status, and found each workflow's last
-- success, with a pass over every run at each read (0.36 s a million). They are kept instead: triggers
-- append what each statement changes (runs inserted, deleted, or whose status changed) to
-- lockgate_run_count_changes, and the counts sweep (sweeps/counts.py) folds those rows into
-- lockgate_run_counts every few seconds. A read sums the two: a row per workflow and status, and the changes
-- not folded yet. Appended, never updated in place: writers never wait for each other's row, and a
-- transaction ending many runs does not update one row many times. Table for table the same as
-- migrations/sqlite/0040_run_counts.sql, where both stay empty (SQLite counts its runs at each read).
CREATE TABLE lockgate_run_counts (
    workflow      TEXT NOT NULL,
    status        TEXT NOT NULL,
    n             BIGINT NOT NULL,
    last_finished DOUBLE PRECISION,             -- the newest finished_at counted into this row
    PRIMARY KEY (workflow, status)
);

CREATE TABLE lockgate_run_count_changes (
    workflow      TEXT NOT NULL,
    status        TEXT NOT NULL,
    n             BIGINT NOT NULL,              -- runs in (positive) or out (negative)
    last_finished DOUBLE PRECISION
);

-- A run inserted: one into its status (a row trigger: about 7 us a run here, where a statement trigger's
-- transition table cost about 50 us a statement, and most statements insert one run).
CREATE FUNCTION lockgate_count_run_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO lockgate_run_count_changes (workflow, status, n, last_finished)
    VALUES (NEW.workflow, NEW.status, 1, NEW.finished_at);
    RETURN NULL;
END
$$;

-- Runs deleted, a statement at a time (its rows grouped: one row per workflow and status): retention
-- deletes thousands in one statement.
CREATE FUNCTION lockgate_count_run_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO lockgate_run_count_changes (workflow, status, n)
    SELECT workflow, status, -COUNT(*) FROM removed GROUP BY workflow, status;
    RETURN NULL;
END
$$;

-- A run whose status changed: one out of the old status, one into the new (a row trigger, fired only by a
-- change of status: claims, leases and wake-ups do not change it).
CREATE FUNCTION lockgate_count_run_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO lockgate_run_count_changes (workflow, status, n, last_finished)
    VALUES (OLD.workflow, OLD.status, -1, NULL), (NEW.workflow, NEW.status, 1, NEW.finished_at);
    RETURN NULL;
END
$$;

-- Writes under way finish first (their runs are counted below); later ones wait, then fire the triggers.
LOCK TABLE lockgate_runs IN SHARE ROW EXCLUSIVE MODE;
CREATE TRIGGER lockgate_runs_count_insert AFTER INSERT ON lockgate_runs FOR EACH ROW
    EXECUTE FUNCTION lockgate_count_run_insert();
CREATE TRIGGER lockgate_runs_count_delete AFTER DELETE ON lockgate_runs REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION lockgate_count_run_delete();
CREATE TRIGGER lockgate_runs_count_status AFTER UPDATE OF status ON lockgate_runs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION lockgate_count_run_status();

INSERT INTO lockgate_run_counts (workflow, status, n, last_finished)
SELECT workflow, status, COUNT(*), MAX(finished_at) FROM lockgate_runs GROUP BY workflow, status;
