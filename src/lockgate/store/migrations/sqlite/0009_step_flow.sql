-- Step flow control (store/flow.py): each key's limits, the steps waiting for or holding a slot under
-- a key, the starts its rate window counts, and what a run was started with. Table for table the
-- same as migrations/postgres/0009_step_flow.sql.

-- The FlowControl given at start (JSON of FlowLimits; NULL: the workflow's default applies).
ALTER TABLE lockgate_runs ADD COLUMN flow_control TEXT;
-- Seconds the step waited for its flow-control key before it started (NULL: it did not wait).
ALTER TABLE lockgate_journal ADD COLUMN flow_wait REAL;

-- A key's limits in force: set from the first declaration that reaches it (declared holds that
-- declaration), then changed by a later, different declaration or by hand (declared NULL: an
-- operator's limits, which declarations no longer change).
CREATE TABLE lockgate_flow_keys (
    key         TEXT PRIMARY KEY,
    rate        INTEGER,
    period      REAL NOT NULL,
    parallelism INTEGER,
    declared    TEXT,
    updated_at  REAL NOT NULL
);

-- One row per step waiting for (state 'waiting') or holding (state 'running') a slot of a key. The
-- order of waiting rows (priority first, then id) is the order they start in. A running row counts
-- only while its run is held under the epoch it was taken with: a dead holder's slot frees with
-- its lease.
CREATE TABLE lockgate_flow_slots (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    key           TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    step_key      TEXT NOT NULL,
    priority      INTEGER NOT NULL DEFAULT 0,
    state         TEXT NOT NULL,                -- waiting | running
    epoch         INTEGER,
    waiting_since REAL NOT NULL,
    started_at    REAL,
    UNIQUE (key, run_id, step_key)
);
CREATE INDEX lockgate_flow_slots_order ON lockgate_flow_slots (key, state, priority DESC, id);
CREATE INDEX lockgate_flow_slots_run ON lockgate_flow_slots (run_id);

-- Step starts under a key with a rate (and ctx.rate_limit's slots): the sliding windows.
CREATE TABLE lockgate_flow_starts (
    id  INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    at  REAL NOT NULL
);
CREATE INDEX lockgate_flow_starts_key ON lockgate_flow_starts (key, at);
