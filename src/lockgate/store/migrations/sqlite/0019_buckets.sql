-- A token-bucket throttle key (Throttle(burst=), FlowControl(burst=)): its state in one row (GCRA).
-- The key's theoretical arrival time is anchor + n * period / limit, kept as an instant and a count so
-- that the gate compares it exactly; last_at is its latest start (whether a start went through on burst
-- is judged against it: lockgate.buckets.bucket_hit).
CREATE TABLE lockgate_buckets (
    scope   TEXT NOT NULL,
    key     TEXT NOT NULL,
    anchor  REAL NOT NULL,
    n       INTEGER NOT NULL,
    last_at REAL NOT NULL,
    PRIMARY KEY (scope, key)
);

-- A step flow key's burst (FlowControl(burst=)): its rate window is then a token bucket (lockgate_buckets,
-- scope 'flow').
ALTER TABLE lockgate_flow_keys ADD COLUMN burst INTEGER;
