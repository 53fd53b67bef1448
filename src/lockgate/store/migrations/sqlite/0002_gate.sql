-- The admission gate: parked starts, the ledger, concurrency slots, windows, pauses.

-- A start parked at the gate (debounce/batch group, delayed, paused, throttled, waiting for a slot).
CREATE TABLE lockgate_pending (
    id              TEXT PRIMARY KEY,
    workflow        TEXT NOT NULL,
    ticket          TEXT NOT NULL,              -- the first arrival's ticket
    mode            TEXT NOT NULL,              -- paused | delayed | debounce | batch | throttle | concurrency | key-paused
    stage           TEXT NOT NULL,              -- where the pipeline resumes
    hold_scope      TEXT,                       -- what holds it: a window/slot scope
    hold_key        TEXT,                       -- and the key within it
    group_key       TEXT,                       -- open debounce/batch group (unique while open)
    singleton_key   TEXT,
    payload         TEXT NOT NULL,              -- the run payload (latest/first), or the batch so far
    items           TEXT,                       -- JSON list of item payloads (batch, keep="all")
    keys            TEXT,                       -- JSON: each control's key, computed at arrival
    identity        TEXT,
    idempotency_key TEXT,
    folded          INTEGER NOT NULL DEFAULT 1,
    priority        INTEGER NOT NULL DEFAULT 0,
    fair_key        TEXT,
    on_failure      TEXT,
    retry_of        TEXT,                       -- the failed/cancelled run this start retries
    seq             INTEGER NOT NULL,           -- arrival order (the ledger id of the first arrival)
    first_at        REAL NOT NULL,
    last_at         REAL NOT NULL,
    due_at          REAL,                       -- when the drainer looks again (NULL: on a wake-up)
    expires_at      REAL                        -- first_at + timeouts.start
);
CREATE UNIQUE INDEX lockgate_pending_group ON lockgate_pending (group_key) WHERE group_key IS NOT NULL;
CREATE INDEX lockgate_pending_due ON lockgate_pending (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX lockgate_pending_expires ON lockgate_pending (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX lockgate_pending_hold ON lockgate_pending (mode, hold_scope, hold_key, priority DESC, seq);
CREATE INDEX lockgate_pending_workflow ON lockgate_pending (workflow, mode, priority DESC, seq);
CREATE INDEX lockgate_pending_identity ON lockgate_pending (identity) WHERE identity IS NOT NULL;
CREATE INDEX lockgate_pending_singleton ON lockgate_pending (singleton_key) WHERE singleton_key IS NOT NULL;

-- Every gate decision. kind 'arrival': exactly one per start; kind 'drain': what became of a parked row.
CREATE TABLE lockgate_ledger (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    ticket     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    workflow   TEXT NOT NULL,
    control    TEXT,
    key        TEXT,
    outcome    TEXT NOT NULL,                   -- admitted existing queued collapsed batched dropped skipped expired cancelled released
    reason     TEXT,
    folded     INTEGER NOT NULL DEFAULT 1,
    waited     REAL,
    pending_id TEXT,
    run_id     TEXT,
    at         REAL NOT NULL
);
CREATE INDEX lockgate_ledger_ticket ON lockgate_ledger (ticket);
CREATE INDEX lockgate_ledger_pending ON lockgate_ledger (pending_id) WHERE pending_id IS NOT NULL;
CREATE INDEX lockgate_ledger_workflow ON lockgate_ledger (workflow, outcome, key);
CREATE INDEX lockgate_ledger_at ON lockgate_ledger (at);

-- One row per admitted, unfinished run under a concurrency control.
CREATE TABLE lockgate_slots (
    run_id      TEXT PRIMARY KEY,
    scope       TEXT NOT NULL,                  -- pool:<name> or wf:<workflow>
    key         TEXT NOT NULL,
    workflow    TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at  REAL                            -- timeouts.finish backstop
);
CREATE INDEX lockgate_slots_key ON lockgate_slots (scope, key);

-- Admissions counted by sliding windows (throttle, rate limit).
CREATE TABLE lockgate_window_hits (
    id    INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL,
    key   TEXT NOT NULL,
    at    REAL NOT NULL
);
CREATE INDEX lockgate_window_hits_key ON lockgate_window_hits (scope, key, at);

-- Paused workflows (scope 'wf:<name>') and keys (scope 'key:<key>').
CREATE TABLE lockgate_pauses (
    scope      TEXT PRIMARY KEY,
    reason     TEXT,
    until      REAL,
    created_at REAL NOT NULL
);

ALTER TABLE lockgate_runs ADD COLUMN singleton_key TEXT;
ALTER TABLE lockgate_runs ADD COLUMN deadline_at REAL;
ALTER TABLE lockgate_runs ADD COLUMN on_failure TEXT;
ALTER TABLE lockgate_runs ADD COLUMN slot_scope TEXT;
ALTER TABLE lockgate_runs ADD COLUMN slot_key TEXT;
CREATE INDEX lockgate_runs_singleton ON lockgate_runs (singleton_key) WHERE singleton_key IS NOT NULL;
CREATE INDEX lockgate_runs_deadline ON lockgate_runs (deadline_at) WHERE deadline_at IS NOT NULL;
