-- /metrics and `lockgate stats` counted the runs by workflow and status, and found each workflow's last
-- success, with a pass over every run at each read (0.36 s a million). They are kept instead: a trigger
-- appends what each statement changes (runs inserted, deleted, or whose status changed) to
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

-- Inserted and deleted runs, a statement at a time (its rows grouped: one row per workflow and status).
CREATE FUNCTION lockgate_count_run_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO lockgate_run_count_changes (workflow, status, n, last_finished)
        SELECT workflow, status, COUNT(*), MAX(finished_at) FROM added GROUP BY workflow, status;
    ELSE
        INSERT INTO lockgate_run_count_changes (workflow, status, n)
        SELECT workflow, status, -COUNT(*) FROM removed GROUP BY workflow, status;
    END IF;
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
CREATE TRIGGER lockgate_runs_count_insert AFTER INSERT ON lockgate_runs REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION lockgate_count_run_rows();
CREATE TRIGGER lockgate_runs_count_delete AFTER DELETE ON lockgate_runs REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION lockgate_count_run_rows();
CREATE TRIGGER lockgate_runs_count_status AFTER UPDATE OF status ON lockgate_runs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION lockgate_count_run_status();

INSERT INTO lockgate_run_counts (workflow, status, n, last_finished)
SELECT workflow, status, COUNT(*), MAX(finished_at) FROM lockgate_runs GROUP BY workflow, status;
