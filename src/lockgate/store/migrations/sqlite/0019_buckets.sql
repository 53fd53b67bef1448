-- A token-bucket throttle key (Throttle(burst=), FlowControl(burst=)): its state in one row (GCRA).
-- The key's theoretical arrival time is anchor + n * period / limit, kept as an instant and a count so
-- that the gate compares it exactly; last_at is its latest start (a start sooner after it than the
-- steady pace is one let through on burst).
CREATE TABLE lockgate_buckets (
    scope   TEXT NOT NULL,
    key     TEXT NOT NULL,
    anchor  REAL NOT NULL,
    n       INTEGER NOT NULL,
    last_at REAL NOT NULL,
    PRIMARY KEY (scope, key)
);
