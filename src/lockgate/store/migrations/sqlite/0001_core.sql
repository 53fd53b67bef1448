-- Runs, their journal, events, messages, workers and sweep leases.
-- Times are epoch seconds (REAL) from the engine's clock.

CREATE TABLE lockgate_runs (
    id              TEXT PRIMARY KEY,
    workflow        TEXT NOT NULL,
    identity        TEXT NOT NULL UNIQUE,       -- workflow + idempotency key, or the run id
    idempotency_key TEXT,
    status          TEXT NOT NULL,              -- running | suspended | succeeded | failed | cancelled
    waiting_on      TEXT,                       -- timer | signal | update | child | flow | NULL
    waiting_for     TEXT,                       -- JSON: message names / child ids the body waits for
    payload         TEXT NOT NULL,
    output          TEXT,
    error_tag       TEXT,
    error_message   TEXT,
    version         TEXT,
    patches         TEXT NOT NULL DEFAULT '[]',
    parent_id       TEXT,
    parent_close    TEXT,
    retry_of        TEXT,
    ticket          TEXT,
    recording       TEXT NOT NULL DEFAULT 'full',
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    progress_at     REAL NOT NULL,
    finished_at     REAL,
    wake_at         REAL,                       -- runnable once wake_at <= now (status running)
    owner           TEXT,                       -- worker holding the lease
    lease_until     REAL,
    epoch           INTEGER NOT NULL DEFAULT 0, -- fencing token: bumped by every claim
    entered_at      REAL,                       -- set on body entry, cleared on clean exit
    entries         INTEGER NOT NULL DEFAULT 0,
    reclaim_count   INTEGER NOT NULL DEFAULT 0,
    stalled_at      REAL,
    discarded_at    REAL
);
CREATE INDEX lockgate_runs_runnable ON lockgate_runs (wake_at) WHERE status = 'running';
CREATE INDEX lockgate_runs_owner ON lockgate_runs (owner) WHERE owner IS NOT NULL;
CREATE INDEX lockgate_runs_workflow ON lockgate_runs (workflow, status, created_at);
CREATE INDEX lockgate_runs_status ON lockgate_runs (status, created_at);
CREATE INDEX lockgate_runs_created ON lockgate_runs (created_at);
CREATE INDEX lockgate_runs_parent ON lockgate_runs (parent_id) WHERE parent_id IS NOT NULL;

-- The journal: one row per reached durable operation (step, timer, signal, child, ...).
CREATE TABLE lockgate_journal (
    run_id        TEXT NOT NULL,
    step_key      TEXT NOT NULL,                -- name#occurrence
    seq           INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    status        TEXT NOT NULL,                -- completed | failed | pending
    output        TEXT,
    error_tag     TEXT,
    error_message TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    due_at        REAL,
    started_at    REAL,
    finished_at   REAL,
    PRIMARY KEY (run_id, step_key)
) WITHOUT ROWID;

-- Per-attempt introspection rows (skipped under recording="coarse").
CREATE TABLE lockgate_step_attempts (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id        TEXT NOT NULL,
    step_key      TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    status        TEXT NOT NULL,                -- running | completed | failed
    input         TEXT,
    error_tag     TEXT,
    error_message TEXT,
    started_at    REAL NOT NULL,
    finished_at   REAL
);
CREATE INDEX lockgate_step_attempts_run ON lockgate_step_attempts (run_id, id);

CREATE TABLE lockgate_run_events (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    type   TEXT NOT NULL,
    at     REAL NOT NULL,
    data   TEXT
);
CREATE INDEX lockgate_run_events_run ON lockgate_run_events (run_id, id);
CREATE INDEX lockgate_run_events_type ON lockgate_run_events (type, id);

-- Signals and updates addressed to runs.
CREATE TABLE lockgate_messages (
    id            TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL,
    kind          TEXT NOT NULL,                -- signal | update
    name          TEXT NOT NULL,
    payload       TEXT,
    status        TEXT NOT NULL,                -- pending | consumed | completed | failed
    step_key      TEXT,
    result        TEXT,
    error_tag     TEXT,
    error_message TEXT,
    created_at    REAL NOT NULL,
    finished_at   REAL
);
CREATE INDEX lockgate_messages_pending ON lockgate_messages (run_id, kind, name, created_at) WHERE status = 'pending';
CREATE INDEX lockgate_messages_run ON lockgate_messages (run_id, created_at);

CREATE TABLE lockgate_workers (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    stopped_at   REAL
);

-- One row per coordinated sweep: whoever holds the lease runs the tick.
CREATE TABLE lockgate_sweep_leases (
    name        TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    lease_until REAL NOT NULL,
    ticks       INTEGER NOT NULL DEFAULT 0
);
