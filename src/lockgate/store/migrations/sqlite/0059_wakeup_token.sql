-- PostgreSQL's wake-ups name who raised them and their transaction, for the workers to agree who
-- claims first (engine/claim_order.py), and its workers record their store's origin; SQLite's change
-- check (store/sqlite_wakeups.py) carries no token, and every worker that sees a change looks at once,
-- as before. The column is here for the same schema on both.
ALTER TABLE lockgate_workers ADD COLUMN origin TEXT;
