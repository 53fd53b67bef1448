-- PostgreSQL partitions its stream chunks with the run history here (docs/history.md); SQLite keeps its
-- table as it is.
SELECT 1;
