-- PostgreSQL's retirement of a run history partition keeps the runs left in its range (docs/history.md);
-- SQLite keeps its tables as they are.
SELECT 1;
