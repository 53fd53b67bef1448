-- PostgreSQL partitions its schedule firings by time here (docs/history.md); SQLite keeps its table as it is.
SELECT 1;
