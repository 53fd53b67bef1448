-- Past events offered again to their triggers (lockgate events replay, sweeps/replay.py). Table for
-- table the same as migrations/postgres/0030_event_replays.sql.

-- One row per replayed (event, trigger), numbered: replay 1, then 2 with --force, ... Its columns
-- are a delivery's (lockgate_deliveries), so that both are listed together.
CREATE TABLE lockgate_replays (
    id              TEXT PRIMARY KEY,
    event_id        TEXT NOT NULL,
    trigger_name    TEXT NOT NULL,
    workflow        TEXT NOT NULL,
    replay          INTEGER NOT NULL,
    status          TEXT NOT NULL,              -- started | skipped | failed
    reason          TEXT,
    idempotency_key TEXT,
    outcome         TEXT,
    run_id          TEXT,
    ticket          TEXT,
    created_at      REAL NOT NULL,
    delivered_at    REAL,
    UNIQUE (event_id, trigger_name, replay)
);
CREATE INDEX lockgate_replays_at ON lockgate_replays (created_at);
