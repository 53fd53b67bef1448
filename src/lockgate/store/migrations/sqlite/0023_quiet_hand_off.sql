-- PostgreSQL's 0023 keeps a hand-off's freed slot from waking other processes' drainers. SQLite
-- raises no wake-ups from triggers: nothing changes here (kept so both dialects share versions).
SELECT 1;
