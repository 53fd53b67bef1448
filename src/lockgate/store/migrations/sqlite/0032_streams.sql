-- Run streams (ctx.stream, engine/streams.py) and the secret stream read tokens are signed with.
-- Table for table the same as migrations/postgres/0032_streams.sql.

-- One row per chunk a body streamed, numbered per run and topic (seq from 1). A chunk a step attempt
-- wrote names the step and the attempt; a 'reset' row tells readers to drop that attempt's chunks.
-- id orders every chunk of every run: a process's readers follow new chunks with one query.
CREATE TABLE lockgate_stream_chunks (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL,
    topic       TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,              -- chunk | reset
    step_key    TEXT,
    attempt     INTEGER,
    data        TEXT,                       -- JSON (sealed for an encrypted workflow); NULL for a reset
    size        INTEGER NOT NULL,           -- bytes of the chunk's JSON, counted against the run's cap
    created_at  REAL NOT NULL
);
CREATE UNIQUE INDEX lockgate_stream_chunks_seq ON lockgate_stream_chunks (run_id, topic, seq);

-- Secrets this database's processes share (the key stream read tokens are signed with), made on first use.
CREATE TABLE lockgate_secrets (
    name        TEXT PRIMARY KEY,
    value       TEXT NOT NULL,
    created_at  REAL NOT NULL
);
