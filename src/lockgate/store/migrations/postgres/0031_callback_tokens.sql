-- Approval tokens (ctx.create_token, engine/callbacks.py). Table for table the same as
-- migrations/sqlite/0031_callback_tokens.sql.

-- One row per token a body made. The secret is never stored: ``hash`` is its SHA-256, the only way
-- a completion finds the row. ``id`` names the token to operators and carries no authority. A
-- completion is a message (kind 'token', name = id) to the run, written in the same transaction as
-- the row's status, so two completions of a single-use token cannot both win.
CREATE TABLE lockgate_callback_tokens (
    id           TEXT PRIMARY KEY,
    hash         TEXT NOT NULL UNIQUE,
    run_id       TEXT NOT NULL,
    step_key     TEXT NOT NULL,
    name         TEXT NOT NULL,
    model        TEXT,                       -- module:qualname of the payload's model, when importable
    single_use   INTEGER NOT NULL,
    status       TEXT NOT NULL,              -- pending | completed (expired: past expires_at)
    uses         INTEGER NOT NULL DEFAULT 0,
    created_at   DOUBLE PRECISION NOT NULL,
    expires_at   DOUBLE PRECISION,
    completed_at DOUBLE PRECISION,
    UNIQUE (run_id, step_key)
);
