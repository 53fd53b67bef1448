-- Domain events and their deliveries (store/events.py). Kept in lockstep with sql/postgres/events.sql.

-- name: insert_domain_event
INSERT INTO lockgate_events (id, name, key, data, source, trace_id, subject, occurred_at)
VALUES (:id, :name, :key, :data, :source, :trace_id, :subject, :occurred_at);

-- name: insert_event_id
-- Where events are partitioned, an id the publisher gave is kept apart; here the events' key holds it.
SELECT :id AS id, :occurred_at AS occurred_at WHERE 0;

-- name: insert_delivery
INSERT INTO lockgate_deliveries (id, event_id, trigger_name, workflow, status, created_at)
VALUES (:id, :event_id, :trigger_name, :workflow, 'pending', :created_at)
ON CONFLICT (event_id, trigger_name) DO NOTHING;

-- name: get_domain_event
SELECT * FROM lockgate_events WHERE id = :id;

-- name: list_domain_events
SELECT * FROM lockgate_events
WHERE (:name IS NULL OR name = :name) AND (:since IS NULL OR occurred_at >= :since)
ORDER BY occurred_at DESC, id DESC
LIMIT :limit;

-- name: list_deliveries
SELECT * FROM lockgate_deliveries WHERE event_id = :event_id ORDER BY trigger_name;

-- name: pending_deliveries
-- The oldest pending deliveries of the triggers this app declares, with their event, for the fan-out sweep.
SELECT d.id, d.event_id, d.trigger_name, d.workflow, d.created_at,
    e.name, e.key, e.data, e.source, e.trace_id, e.subject, e.occurred_at
FROM lockgate_deliveries d JOIN lockgate_events e ON e.id = d.event_id
WHERE d.status = 'pending' AND d.trigger_name IN (SELECT value FROM json_each(:triggers))
ORDER BY d.created_at, d.id
LIMIT :limit;

-- name: started_delivery_by_key
-- A delivery that already started the workflow under this idempotency key (the dedupe check).
SELECT id, event_id, run_id, ticket FROM lockgate_deliveries
WHERE workflow = :workflow AND idempotency_key = :idempotency_key AND status = 'started' AND id <> :id
LIMIT 1;

-- name: settle_delivery
-- Only a pending delivery settles: a second sweep over the same row changes nothing.
-- The start a ticket names must be in this database: after a failover that lost its commit (asynchronous
-- replication) a write retried on the promoted server would otherwise record a start that never happened
-- there. Left as it was, the row is offered again (docs/postgres.md).
UPDATE lockgate_deliveries
SET status = :status, reason = :reason, idempotency_key = :idempotency_key, outcome = :outcome,
    run_id = :run_id, ticket = :ticket, delivered_at = :now
WHERE id = :id AND created_at = :created_at AND status = 'pending'
    AND (:ticket IS NULL OR EXISTS (SELECT 1 FROM lockgate_ledger WHERE ticket = :ticket))
RETURNING id;

-- name: unswept_events
SELECT * FROM lockgate_events WHERE cancel_swept_at IS NULL ORDER BY occurred_at, id LIMIT :limit;

-- name: mark_event_swept
-- By its id and its time: one partition of the events, where they are partitioned.
UPDATE lockgate_events SET cancel_swept_at = :now, problem = :problem WHERE id = :id AND occurred_at = :occurred_at;

-- name: cancel_on_runs
-- Live runs of a workflow created no later than the event (and not before the within= window).
SELECT id, payload, ticket, created_at FROM lockgate_runs
WHERE workflow = :workflow AND status IN ('running', 'suspended')
  AND created_at <= :before AND (:after IS NULL OR created_at >= :after)
ORDER BY created_at
LIMIT :limit;

-- name: cancel_on_parked
-- Starts of a workflow parked at the gate whose first arrival came no later than the event.
SELECT id, ticket, payload, items, first_at FROM lockgate_pending
WHERE workflow = :workflow AND first_at <= :before AND (:after IS NULL OR first_at >= :after)
ORDER BY seq
LIMIT :limit;

-- name: forget_domain_events
DELETE FROM lockgate_events WHERE id IN (
    SELECT e.id FROM lockgate_events e WHERE e.occurred_at < :cutoff
      AND NOT EXISTS (SELECT 1 FROM lockgate_deliveries d WHERE d.event_id = e.id AND d.status = 'pending')
    LIMIT :limit
)
RETURNING id;

-- name: forget_deliveries
DELETE FROM lockgate_deliveries WHERE id IN (
    SELECT id FROM lockgate_deliveries WHERE created_at < :cutoff AND status <> 'pending' LIMIT :limit
)
RETURNING id;

-- name: replay_candidates
-- Events of one name published in [since, until], oldest first (lockgate events replay).
SELECT * FROM lockgate_events
WHERE name = :name AND occurred_at >= :since AND occurred_at <= :until
ORDER BY occurred_at, id
LIMIT :limit;

-- name: delivery_of
SELECT * FROM lockgate_deliveries WHERE event_id = :event_id AND trigger_name = :trigger_name;

-- name: last_replay
SELECT max(replay) AS replay FROM lockgate_replays WHERE event_id = :event_id AND trigger_name = :trigger_name;

-- name: insert_replay
INSERT INTO lockgate_replays (id, event_id, trigger_name, workflow, replay, status, reason, idempotency_key,
    outcome, run_id, ticket, created_at, delivered_at)
VALUES (:id, :event_id, :trigger_name, :workflow, :replay, :status, :reason,
    :idempotency_key, :outcome, :run_id, :ticket, :now, :now)
ON CONFLICT (event_id, trigger_name, replay) DO NOTHING
RETURNING id;

-- name: list_replays
SELECT * FROM lockgate_replays WHERE event_id = :event_id ORDER BY trigger_name, replay;

-- name: forget_replays
DELETE FROM lockgate_replays WHERE id IN (
    SELECT id FROM lockgate_replays WHERE created_at < :cutoff LIMIT :limit
)
RETURNING id;
