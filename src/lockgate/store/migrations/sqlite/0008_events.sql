-- Domain events and their per-trigger deliveries (events.py, store/events.py), and where every run
-- came from. Table for table the same as migrations/postgres/0008_events.sql.

-- One row per published event. cancel_swept_at is the cancel-on sweep's durable watermark, kept per
-- row: an event is read by the sweep until it is marked, whatever order concurrent publishers
-- committed in (a single "last id read" would skip an event whose transaction committed late).
CREATE TABLE lockgate_events (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    key             TEXT NOT NULL,              -- JSON, validated against the declaration
    data            TEXT NOT NULL,              -- JSON, validated against the declaration
    source          TEXT NOT NULL,              -- api | client | cli | run:<id> | ...
    trace_id        TEXT,
    subject         TEXT,                       -- JSON identity of the publisher (never its authority)
    occurred_at     REAL NOT NULL,
    cancel_swept_at REAL,                       -- when the cancel-on sweep handled it (NULL: not yet)
    problem         TEXT                        -- why the cancel-on sweep could not read it (undecodable)
);
CREATE INDEX lockgate_events_name ON lockgate_events (name, occurred_at);
CREATE INDEX lockgate_events_at ON lockgate_events (occurred_at);
CREATE INDEX lockgate_events_unswept ON lockgate_events (occurred_at) WHERE cancel_swept_at IS NULL;

-- One row per (event, trigger), written with the event: pending -> started | skipped | failed.
CREATE TABLE lockgate_deliveries (
    id              TEXT PRIMARY KEY,
    event_id        TEXT NOT NULL,
    trigger_name    TEXT NOT NULL,
    workflow        TEXT NOT NULL,
    status          TEXT NOT NULL,              -- pending | started | skipped | failed
    reason          TEXT,                       -- skipped: filtered | duplicate; failed: the error
    idempotency_key TEXT,
    outcome         TEXT,                       -- the gate's decision: started | existing | queued | ...
    run_id          TEXT,
    ticket          TEXT,
    created_at      REAL NOT NULL,
    delivered_at    REAL,
    UNIQUE (event_id, trigger_name)
);
CREATE INDEX lockgate_deliveries_pending ON lockgate_deliveries (created_at) WHERE status = 'pending';
CREATE INDEX lockgate_deliveries_key ON lockgate_deliveries (workflow, idempotency_key) WHERE status = 'started';
CREATE INDEX lockgate_deliveries_at ON lockgate_deliveries (created_at);

-- Where a start came from (api, client, cli, http, child:<id>, retry:<id>, event:<name>, ...), the
-- starter's trace id and identity: on the run, on the parked start it may wait as, on its ledger rows.
ALTER TABLE lockgate_runs ADD COLUMN source TEXT;
ALTER TABLE lockgate_runs ADD COLUMN trace_id TEXT;
ALTER TABLE lockgate_runs ADD COLUMN subject TEXT;
ALTER TABLE lockgate_pending ADD COLUMN source TEXT;
ALTER TABLE lockgate_pending ADD COLUMN trace_id TEXT;
ALTER TABLE lockgate_pending ADD COLUMN subject TEXT;
ALTER TABLE lockgate_ledger ADD COLUMN source TEXT;
ALTER TABLE lockgate_ledger ADD COLUMN trace_id TEXT;
CREATE INDEX lockgate_runs_source ON lockgate_runs (source, created_at) WHERE source IS NOT NULL;
