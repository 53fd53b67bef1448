-- Schedules: each declared schedule's durable state, and the firing ledger whose unique claim makes
-- one replica fire each slot. Table for table the same as migrations/postgres/0007_schedules.sql.

-- One row per schedule any engine has declared. Rows are never deleted with the code that declared
-- them: a schedule no engine declares any more is marked orphaned and stops firing.
CREATE TABLE lockgate_schedules (
    name          TEXT PRIMARY KEY,
    workflow      TEXT NOT NULL,
    spec          TEXT NOT NULL,                -- 'cron 0 3 * * *' | 'every 15m', as last declared
    timezone      TEXT NOT NULL,
    paused        INTEGER NOT NULL DEFAULT 0,
    paused_reason TEXT,
    paused_at     REAL,
    watermark     REAL,                         -- slots at or before this instant have been dealt with
    missed        INTEGER NOT NULL DEFAULT 0,   -- slots passed over by the catch-up rule, in all
    orphaned_at   REAL,                         -- set while no engine declares the schedule
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL
);

-- The firing ledger: one row per slot claimed (and per manual run). The unique claim is what makes
-- a slot fire once across replicas; a later slot is a new row, so a crashed claimant blocks nothing.
CREATE TABLE lockgate_schedule_firings (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule        TEXT NOT NULL,
    scheduled_at    REAL NOT NULL,
    manual          INTEGER NOT NULL DEFAULT 0, -- 0: a slot; else an operator's run-now, a number of its own
    cause           TEXT NOT NULL,              -- cron | catch-up | backfill | manual
    workflow        TEXT NOT NULL,
    source          TEXT NOT NULL,              -- schedule:<name> (the runs table has no source yet)
    identity        TEXT NOT NULL,              -- the run identity the start claims (workflow + key)
    idempotency_key TEXT NOT NULL,
    status          TEXT NOT NULL,              -- claimed | buffered | skipped | started | succeeded | failed | cancelled
    why             TEXT,                       -- skipped: overlap, buffer full...; failed: the error
    run_id          TEXT,
    ticket          TEXT,
    start_status    TEXT,                       -- what the gate answered: started | existing | queued | ...
    owner           TEXT,                       -- the worker (or client) that claimed it
    lease_until     REAL,                       -- a claim not started by then is taken over
    claimed_at      REAL NOT NULL,
    started_at      REAL,
    finished_at     REAL,
    UNIQUE (schedule, scheduled_at, manual)
);
CREATE INDEX lockgate_schedule_firings_live ON lockgate_schedule_firings (schedule, scheduled_at)
    WHERE status IN ('claimed', 'buffered', 'started');
CREATE INDEX lockgate_schedule_firings_recent ON lockgate_schedule_firings (schedule, id);
CREATE INDEX lockgate_schedule_firings_claimed ON lockgate_schedule_firings (claimed_at);
