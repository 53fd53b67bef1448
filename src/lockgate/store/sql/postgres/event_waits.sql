-- Runs waiting for a domain event (store/event_waits.py). Kept in lockstep with sql/sqlite/event_waits.sql.

-- name: lock_event_keys_shared
-- A publish and a park that could meet on a key serialise on it (a park takes it exclusively), so that
-- one of the two always sees the other's row: no event slips between a wait's last look and its park.
-- Publishes take it shared and never wait for each other. Locked in key order: no deadlock.
SELECT count(pg_advisory_xact_lock_shared(k)) AS n FROM (
    SELECT ('x' || substr(value, 1, 16))::bit(64)::bigint AS k
    FROM jsonb_array_elements_text(%(keys)s::jsonb) ORDER BY 1
) s;

-- name: lock_event_keys
SELECT count(pg_advisory_xact_lock(k)) AS n FROM (
    SELECT ('x' || substr(value, 1, 16))::bit(64)::bigint AS k
    FROM jsonb_array_elements_text(%(keys)s::jsonb) ORDER BY 1
) s;

-- name: insert_event_keys
INSERT INTO lockgate_event_keys (key, occurred_at, event_id)
SELECT DISTINCT value, %(occurred_at)s::double precision, %(event_id)s::text FROM jsonb_array_elements_text(%(keys)s::jsonb)
ON CONFLICT DO NOTHING;

-- name: wake_event_waiters
-- Parked runs holding a wait under one of the published event's keys become due now (the runs
-- wake-up then tells the other processes). A run being executed is found by its own park instead.
-- Each key's waits, then each run, is read by its id behind OFFSET 0: joined plainly, a planner without
-- statistics (10,000 runs parked since the last ANALYZE) reads every wait and every live run instead.
-- The runs are locked in id order (the state test is made again on the row locked): no deadlock.
WITH parked AS MATERIALIZED (
    SELECT r.id FROM (
        SELECT DISTINCT w.run_id FROM jsonb_array_elements_text(%(keys)s::jsonb) j(k)
        CROSS JOIN LATERAL (SELECT run_id FROM lockgate_event_waits WHERE key = j.k OFFSET 0) w
        ORDER BY w.run_id
    ) w
    CROSS JOIN LATERAL (
        SELECT id FROM lockgate_runs
        WHERE id = w.run_id AND status = 'running' AND owner IS NULL AND (wake_at IS NULL OR wake_at > %(now)s)
        FOR UPDATE
    ) r
)
UPDATE lockgate_runs SET wake_at = %(now)s, updated_at = %(now)s
WHERE id = ANY (ARRAY(SELECT id FROM parked))
RETURNING id;

-- name: claim_woken_waiters
-- A publish made by a process that executes runs, before wake_event_waiters: of the parked runs waiting under
-- the event's keys, up to %(limit)s that this worker takes (claim_runs' filter) are claimed for it, as
-- claim_runs would claim them. Every such run is locked here, in id order, as the wake locks them: the wake
-- then waits for no row, and two publishes never lock the same runs in two orders. A run claimed here is
-- no longer parked: the wake leaves it (and no other process is told of it).
WITH parked AS MATERIALIZED (
    SELECT r.id, r.mine FROM (
        SELECT DISTINCT w.run_id FROM jsonb_array_elements_text(%(keys)s::jsonb) j(k)
        CROSS JOIN LATERAL (SELECT run_id FROM lockgate_event_waits WHERE key = j.k OFFSET 0) w
        ORDER BY w.run_id
    ) w
    CROSS JOIN LATERAL (
        SELECT id,
            workflow || chr(31) || COALESCE(version, '') IN (SELECT jsonb_array_elements_text(%(claim_keys)s::jsonb))
            AND (patches = '[]' OR patches::jsonb <@ (%(patches)s::jsonb -> workflow)) AS mine
        FROM lockgate_runs
        WHERE id = w.run_id AND status = 'running' AND owner IS NULL AND (wake_at IS NULL OR wake_at > %(now)s)
        FOR UPDATE
    ) r
)
UPDATE lockgate_runs
SET owner = %(owner)s, epoch = epoch + 1, lease_until = %(lease_until)s,
    reclaim_count = CASE WHEN entered_at IS NOT NULL THEN reclaim_count + 1 ELSE 0 END,
    entered_at = %(now)s, entries = entries + 1, wake_at = %(now)s, updated_at = %(now)s
WHERE id = ANY (ARRAY(SELECT id FROM parked WHERE mine ORDER BY id LIMIT %(limit)s))
RETURNING *;

-- name: delete_step_waits
DELETE FROM lockgate_event_waits WHERE run_id = %(run_id)s AND step_key = %(step_key)s;

-- name: insert_event_wait
INSERT INTO lockgate_event_waits (run_id, step_key, key, name, match, since, created_at)
VALUES (%(run_id)s, %(step_key)s, %(key)s, %(name)s, %(match)s, %(since)s, %(now)s)
ON CONFLICT (run_id, step_key, key) DO UPDATE SET since = EXCLUDED.since, match = EXCLUDED.match;

-- name: event_candidates
-- Events under one of the wait's keys, from its lookback on, that this run has not consumed, oldest
-- first, after the cursor (occurred_at, event id) of the page before. Each event is read by its id behind
-- OFFSET 0 (a planner without statistics would hash the whole log otherwise), and by its time too (the key
-- keeps it): one partition of the events.
SELECT e.* FROM lockgate_event_keys k
CROSS JOIN LATERAL (SELECT * FROM lockgate_events WHERE id = k.event_id AND occurred_at = k.occurred_at OFFSET 0) e
WHERE k.key = ANY (ARRAY(SELECT jsonb_array_elements_text(%(keys)s::jsonb))) AND k.occurred_at >= %(since)s
  AND (k.occurred_at, k.event_id) > (%(after_at)s::double precision, %(after_id)s::text)
  AND NOT EXISTS (SELECT 1 FROM lockgate_event_consumed c WHERE c.run_id = %(run_id)s AND c.event_id = k.event_id)
ORDER BY k.occurred_at, k.event_id
LIMIT %(limit)s;

-- name: consume_event
INSERT INTO lockgate_event_consumed (run_id, event_id, step_key, consumed_at)
VALUES (%(run_id)s, %(event_id)s, %(step_key)s, %(now)s)
ON CONFLICT DO NOTHING
RETURNING event_id;

-- name: run_event_waits
SELECT step_key, key, name, match, since, created_at FROM lockgate_event_waits WHERE run_id = %(run_id)s
ORDER BY step_key, name;

-- name: waiting_per_event
-- Parked runs waiting per workflow and event name (flow()); a run that ended while waiting is not counted.
SELECT r.workflow, w.name, count(DISTINCT w.run_id) AS waiting FROM lockgate_event_waits w
JOIN lockgate_runs r ON r.id = w.run_id AND r.status = 'running'
WHERE %(workflow)s::text IS NULL OR r.workflow = %(workflow)s::text
GROUP BY r.workflow, w.name ORDER BY r.workflow, w.name;

-- name: forget_event_keys
DELETE FROM lockgate_event_keys WHERE (key, occurred_at, event_id) IN (
    SELECT key, occurred_at, event_id FROM lockgate_event_keys WHERE occurred_at < %(cutoff)s LIMIT %(limit)s
)
RETURNING event_id;

-- name: forget_stale_waits
-- Waits of runs that ended (cancelled, failed) while they waited.
DELETE FROM lockgate_event_waits WHERE run_id IN (
    SELECT w.run_id FROM lockgate_event_waits w LEFT JOIN lockgate_runs r ON r.id = w.run_id
    WHERE r.id IS NULL OR r.status NOT IN ('running', 'suspended') LIMIT %(limit)s
)
RETURNING run_id;

-- name: forget_consumed
DELETE FROM lockgate_event_consumed WHERE (run_id, event_id) IN (
    SELECT run_id, event_id FROM lockgate_event_consumed WHERE consumed_at < %(cutoff)s LIMIT %(limit)s
)
RETURNING run_id;
