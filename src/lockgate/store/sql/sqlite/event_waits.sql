-- Runs waiting for a domain event (store/event_waits.py). Kept in lockstep with sql/postgres/event_waits.sql.

-- name: lock_event_keys_shared
-- SQLite serialises every write transaction already (one writer at a time, BEGIN IMMEDIATE): a
-- publish and a park cannot interleave, so there is nothing to lock. Kept so both dialects name it.
SELECT count(*) AS n FROM json_each(:keys);

-- name: lock_event_keys
SELECT count(*) AS n FROM json_each(:keys);

-- name: insert_event_keys
INSERT INTO lockgate_event_keys (key, occurred_at, event_id)
SELECT DISTINCT value, :occurred_at, :event_id FROM json_each(:keys) WHERE true
ON CONFLICT DO NOTHING;

-- name: wake_event_waiters
-- Parked runs holding a wait under one of the published event's keys become due now (the runs
-- wake-up then tells the other processes). A run being executed is found by its own park instead.
UPDATE lockgate_runs SET wake_at = :now, updated_at = :now
WHERE id IN (SELECT w.run_id FROM json_each(:keys) j CROSS JOIN lockgate_event_waits w WHERE w.key = j.value)
  AND status = 'running' AND owner IS NULL AND (wake_at IS NULL OR wake_at > :now)
RETURNING id;

-- name: claim_woken_waiters
-- A publish made by a process that executes runs, before wake_event_waiters: of the parked runs waiting under
-- the event's keys, up to :limit that this worker takes (claim_runs' filter) are claimed for it, as
-- claim_runs would claim them. A run claimed here is no longer parked: the wake leaves it.
UPDATE lockgate_runs
SET owner = :owner, epoch = epoch + 1, lease_until = :lease_until,
    reclaim_count = CASE WHEN entered_at IS NOT NULL THEN reclaim_count + 1 ELSE 0 END,
    entered_at = :now, entries = entries + 1, wake_at = :now, updated_at = :now
WHERE id IN (
    SELECT r.id FROM json_each(:keys) j CROSS JOIN lockgate_event_waits w CROSS JOIN lockgate_runs r
    WHERE w.key = j.value AND r.id = w.run_id AND r.status = 'running' AND r.owner IS NULL
      AND (r.wake_at IS NULL OR r.wake_at > :now)
      AND r.workflow || char(31) || COALESCE(r.version, '') IN (SELECT value FROM json_each(:claim_keys))
      AND (r.patches = '[]' OR NOT EXISTS (
          SELECT 1 FROM json_each(r.patches) p
          WHERE p.value NOT IN (SELECT pv.value FROM json_each(:patches, '$."' || r.workflow || '"') pv)))
    ORDER BY r.id LIMIT :limit)
RETURNING *;

-- name: delete_step_waits
DELETE FROM lockgate_event_waits WHERE run_id = :run_id AND step_key = :step_key;

-- name: insert_event_wait
INSERT INTO lockgate_event_waits (run_id, step_key, key, name, match, since, created_at)
VALUES (:run_id, :step_key, :key, :name, :match, :since, :now)
ON CONFLICT (run_id, step_key, key) DO UPDATE SET since = EXCLUDED.since, match = EXCLUDED.match;

-- name: event_candidates
-- Events under one of the wait's keys, from its lookback on, that this run has not consumed, oldest
-- first, after the cursor (occurred_at, event id) of the page before.
SELECT e.* FROM json_each(:keys) j CROSS JOIN lockgate_event_keys k JOIN lockgate_events e ON e.id = k.event_id
WHERE k.key = j.value AND k.occurred_at >= :since
  AND (k.occurred_at, k.event_id) > (:after_at, :after_id)
  AND NOT EXISTS (SELECT 1 FROM lockgate_event_consumed c WHERE c.run_id = :run_id AND c.event_id = k.event_id)
ORDER BY k.occurred_at, k.event_id
LIMIT :limit;

-- name: consume_event
INSERT INTO lockgate_event_consumed (run_id, event_id, step_key, consumed_at)
VALUES (:run_id, :event_id, :step_key, :now)
ON CONFLICT DO NOTHING
RETURNING event_id;

-- name: run_event_waits
SELECT step_key, key, name, match, since, created_at FROM lockgate_event_waits WHERE run_id = :run_id
ORDER BY step_key, name;

-- name: waiting_per_event
-- Parked runs waiting per workflow and event name (flow()); a run that ended while waiting is not counted.
SELECT r.workflow, w.name, count(DISTINCT w.run_id) AS waiting FROM lockgate_event_waits w
JOIN lockgate_runs r ON r.id = w.run_id AND r.status = 'running'
WHERE :workflow IS NULL OR r.workflow = :workflow
GROUP BY r.workflow, w.name ORDER BY r.workflow, w.name;

-- name: forget_event_keys
DELETE FROM lockgate_event_keys WHERE (key, occurred_at, event_id) IN (
    SELECT key, occurred_at, event_id FROM lockgate_event_keys WHERE occurred_at < :cutoff LIMIT :limit
)
RETURNING event_id;

-- name: forget_stale_waits
-- Waits of runs that ended (cancelled, failed) while they waited.
DELETE FROM lockgate_event_waits WHERE run_id IN (
    SELECT w.run_id FROM lockgate_event_waits w LEFT JOIN lockgate_runs r ON r.id = w.run_id
    WHERE r.id IS NULL OR r.status NOT IN ('running', 'suspended') LIMIT :limit
)
RETURNING run_id;

-- name: forget_consumed
DELETE FROM lockgate_event_consumed WHERE (run_id, event_id) IN (
    SELECT run_id, event_id FROM lockgate_event_consumed WHERE consumed_at < :cutoff LIMIT :limit
)
RETURNING run_id;
