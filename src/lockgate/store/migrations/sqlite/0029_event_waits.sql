-- Runs waiting for a domain event (ctx.wait_for_event, engine/event_waits.py). Table for table the
-- same as migrations/postgres/0029_event_waits.sql.

-- One row per scalar leaf of each published event's data, and one "any" row, each under a hashed key
-- of (event name, field path, value) (matching.py): a wait finds earlier events by its key, and a
-- publish its waiters, through an index, never by scanning every event or every waiting run.
CREATE TABLE lockgate_event_keys (
    key         TEXT NOT NULL,
    occurred_at REAL NOT NULL,
    event_id    TEXT NOT NULL,
    PRIMARY KEY (key, occurred_at, event_id)
);
CREATE INDEX lockgate_event_keys_at ON lockgate_event_keys (occurred_at);

-- One row per wait a parked run holds (rewritten at each park, deleted when the wait ends).
CREATE TABLE lockgate_event_waits (
    run_id      TEXT NOT NULL,
    step_key    TEXT NOT NULL,
    key         TEXT NOT NULL,
    name        TEXT NOT NULL,              -- the awaited event
    match       TEXT,                       -- JSON: the equalities shown (none when the workflow is encrypted)
    since       REAL NOT NULL,                -- the oldest event that satisfies it (lookback)
    created_at  REAL NOT NULL,
    PRIMARY KEY (run_id, step_key, key)
);
CREATE INDEX lockgate_event_waits_key ON lockgate_event_waits (key);
CREATE INDEX lockgate_event_waits_name ON lockgate_event_waits (name);

-- Which events each run's waits consumed: a second wait for the same event gets the next one.
CREATE TABLE lockgate_event_consumed (
    run_id      TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    step_key    TEXT NOT NULL,
    consumed_at REAL NOT NULL,
    PRIMARY KEY (run_id, event_id)
);
CREATE INDEX lockgate_event_consumed_event ON lockgate_event_consumed (event_id);
