-- flow() read its counts by aggregating the whole ledger on every call; they are kept here instead,
-- per workflow, key and outcome. Table for table the same as migrations/postgres/0006_flow_counts.sql,
-- which counts by trigger: here the store folds the ledger rows each group commit wrote, once per
-- commit (store/sqlite.py), up to the ledger id in lockgate_flow_counted; a read adds the rows past
-- it, so the counts stay exact whoever wrote the ledger.
CREATE TABLE lockgate_flow_counts (
    workflow TEXT NOT NULL,
    key      TEXT NOT NULL,                     -- '' for a decision without a key
    outcome  TEXT NOT NULL,
    part     INTEGER NOT NULL,                  -- PostgreSQL writers count apart (one part each); here 0
    n        INTEGER NOT NULL,
    PRIMARY KEY (workflow, key, outcome, part)
) WITHOUT ROWID;

-- The newest ledger id folded into lockgate_flow_counts (one row).
CREATE TABLE lockgate_flow_counted (
    upto INTEGER NOT NULL
);

INSERT INTO lockgate_flow_counts (workflow, key, outcome, part, n)
SELECT workflow, COALESCE(key, ''), outcome, 0, COUNT(*) FROM lockgate_ledger
GROUP BY workflow, COALESCE(key, ''), outcome;
INSERT INTO lockgate_flow_counted (upto) SELECT COALESCE(MAX(id), 0) FROM lockgate_ledger;

-- Read by nothing since flow() stopped aggregating the ledger; one index fewer per ledger row.
DROP INDEX lockgate_ledger_workflow;
