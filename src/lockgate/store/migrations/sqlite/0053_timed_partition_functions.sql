-- The functions PostgreSQL makes and drops time partitions with (docs/history.md); SQLite partitions nothing.
SELECT 1;
