-- PostgreSQL's wake-ups name the transaction that raised them, for the workers to agree who claims
-- first (engine/claim_order.py); SQLite's change check (store/sqlite_wakeups.py) carries no token,
-- and every worker that sees a change looks at once, as before.
SELECT 1;
