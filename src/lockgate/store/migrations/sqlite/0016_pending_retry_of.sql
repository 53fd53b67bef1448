-- 0002 gained lockgate_pending.retry_of after it had shipped: a store made before lacks it.
-- (The store skips an ADD COLUMN whose column exists: SQLite has no IF NOT EXISTS for columns.)
ALTER TABLE lockgate_pending ADD COLUMN retry_of TEXT;
