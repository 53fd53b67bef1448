-- The schema's own bookkeeping: which migrations the database has applied.

-- name: applied_migrations
SELECT version FROM lockgate_migrations ORDER BY version;
