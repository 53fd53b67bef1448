-- Table for table the same as migrations/postgres/0040_run_counts.sql, where a trigger keeps the runs'
-- counts by workflow and status for /metrics and `lockgate stats`. Here both stay empty: SQLite counts its
-- runs at each read (one process, one file).
CREATE TABLE lockgate_run_counts (
    workflow      TEXT NOT NULL,
    status        TEXT NOT NULL,
    n             INTEGER NOT NULL,
    last_finished REAL,
    PRIMARY KEY (workflow, status)
) WITHOUT ROWID;

CREATE TABLE lockgate_run_count_changes (
    workflow      TEXT NOT NULL,
    status        TEXT NOT NULL,
    n             INTEGER NOT NULL,
    last_finished REAL
);
