-- PostgreSQL partitions its run history here (docs/history.md); SQLite keeps its tables as they are.
SELECT 1;
