-- PostgreSQL notifies a run's end to the processes awaiting it; on SQLite every commit is seen by
-- its change check (store/sqlite_wakeups.py), which wakes them already.
SELECT 1;
