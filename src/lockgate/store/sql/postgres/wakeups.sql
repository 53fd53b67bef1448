-- SQLite's wake-up counters (migration 0024); unused here: wake-ups travel by NOTIFY (store/postgres/notify.py).

-- name: wakeup_counts
SELECT channel, seq FROM lockgate_wakeups;
