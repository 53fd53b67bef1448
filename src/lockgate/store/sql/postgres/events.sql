-- Domain events and their deliveries (store/events.py). Kept in lockstep with sql/sqlite/events.sql.

-- name: insert_domain_event
INSERT INTO lockgate_events (id, name, key, data, source, trace_id, subject, occurred_at)
VALUES (%(id)s, %(name)s, %(key)s, %(data)s, %(source)s, %(trace_id)s, %(subject)s, %(occurred_at)s);

-- name: insert_event_id
-- An id the publisher gave, kept across the events' partitions (migration 0054): a second publish under it
-- fails here, whichever partition the first event is in.
INSERT INTO lockgate_event_ids (id, occurred_at) VALUES (%(id)s, %(occurred_at)s);

-- name: insert_delivery
-- A delivery has its event's time (created_at = occurred_at): one a trigger is checked in the event's partition.
INSERT INTO lockgate_deliveries (id, event_id, trigger_name, workflow, status, created_at)
VALUES (%(id)s, %(event_id)s, %(trigger_name)s, %(workflow)s, 'pending', %(created_at)s)
ON CONFLICT (event_id, trigger_name, created_at) DO NOTHING;

-- name: get_domain_event
SELECT * FROM lockgate_events WHERE id = %(id)s;

-- name: list_domain_events
SELECT * FROM lockgate_events
WHERE (%(name)s::text IS NULL OR name = %(name)s::text) AND (%(since)s::double precision IS NULL OR occurred_at >= %(since)s::double precision)
ORDER BY occurred_at DESC, id DESC
LIMIT %(limit)s;

-- name: list_deliveries
SELECT * FROM lockgate_deliveries WHERE event_id = %(event_id)s ORDER BY trigger_name;

-- name: pending_deliveries
-- The oldest pending deliveries of the triggers this app declares, with their event, for the fan-out sweep.
SELECT d.id, d.event_id, d.trigger_name, d.workflow, d.created_at,
    e.name, e.key, e.data, e.source, e.trace_id, e.subject, e.occurred_at
-- Each event is found by its key, in the partition of its delivery's time.
FROM lockgate_deliveries d JOIN lockgate_events e ON e.id = d.event_id AND e.occurred_at = d.created_at
WHERE d.status = 'pending' AND d.trigger_name IN (SELECT jsonb_array_elements_text(%(triggers)s::jsonb))
ORDER BY d.created_at, d.id
LIMIT %(limit)s;

-- name: started_delivery_by_key
-- A delivery that already started the workflow under this idempotency key (the dedupe check).
SELECT id, event_id, run_id, ticket FROM lockgate_deliveries
WHERE workflow = %(workflow)s AND idempotency_key = %(idempotency_key)s AND status = 'started' AND id <> %(id)s
LIMIT 1;

-- name: settle_delivery
-- Only a pending delivery settles: a second sweep over the same row changes nothing.
-- The start a ticket names must be in this database: after a failover that lost its commit (asynchronous
-- replication) a write retried on the promoted server would otherwise record a start that never happened
-- there. Left as it was, the row is offered again (docs/postgres.md).
UPDATE lockgate_deliveries
SET status = %(status)s, reason = %(reason)s, idempotency_key = %(idempotency_key)s, outcome = %(outcome)s,
    run_id = %(run_id)s, ticket = %(ticket)s, delivered_at = %(now)s
WHERE id = %(id)s AND created_at = %(created_at)s AND status = 'pending'
    AND (%(ticket)s::text IS NULL OR EXISTS (SELECT 1 FROM lockgate_ledger WHERE ticket = %(ticket)s))
RETURNING id;

-- name: unswept_events
SELECT * FROM lockgate_events WHERE cancel_swept_at IS NULL ORDER BY occurred_at, id LIMIT %(limit)s;

-- name: mark_event_swept
-- By its id and its time: one partition of the events, where they are partitioned.
UPDATE lockgate_events SET cancel_swept_at = %(now)s, problem = %(problem)s WHERE id = %(id)s AND occurred_at = %(occurred_at)s;

-- name: cancel_on_runs
-- Live runs of a workflow created no later than the event (and not before the within= window).
SELECT id, payload, ticket, created_at FROM lockgate_runs
WHERE workflow = %(workflow)s AND status IN ('running', 'suspended')
  AND created_at <= %(before)s AND (%(after)s::double precision IS NULL OR created_at >= %(after)s::double precision)
ORDER BY created_at
LIMIT %(limit)s;

-- name: cancel_on_parked
-- Starts of a workflow parked at the gate whose first arrival came no later than the event.
SELECT id, ticket, payload, items, first_at FROM lockgate_pending
WHERE workflow = %(workflow)s AND first_at <= %(before)s AND (%(after)s::double precision IS NULL OR first_at >= %(after)s::double precision)
ORDER BY seq
LIMIT %(limit)s;

-- name: forget_domain_events
-- Events published before the cutoff (where partitioned: those older than every partition of one interval;
-- the others go with their partition), but one a pending delivery still needs; with the id its publisher gave.
-- Both reads name the cutoff, so that only the partitions before it are read (the delete's too).
WITH gone AS (
    DELETE FROM lockgate_events WHERE occurred_at < %(cutoff)s AND id = ANY (ARRAY(
        SELECT e.id FROM lockgate_events e WHERE e.occurred_at < %(cutoff)s
          AND NOT EXISTS (SELECT 1 FROM lockgate_deliveries d
                          WHERE d.event_id = e.id AND d.created_at = e.occurred_at AND d.status = 'pending')
        LIMIT %(limit)s
    ))
    RETURNING id, occurred_at
), ids AS (
    DELETE FROM lockgate_event_ids i USING gone WHERE i.id = gone.id RETURNING 1
)
SELECT id FROM gone;

-- name: forget_deliveries
-- Both reads name the cutoff (where partitioned, before their oldest partition of one interval): only the
-- partitions before it are read.
DELETE FROM lockgate_deliveries WHERE created_at < %(cutoff)s AND id = ANY (ARRAY(
    SELECT id FROM lockgate_deliveries WHERE created_at < %(cutoff)s AND status <> 'pending' LIMIT %(limit)s
))
RETURNING id;

-- name: replay_candidates
-- Events of one name published in [since, until], oldest first (lockgate events replay).
SELECT * FROM lockgate_events
WHERE name = %(name)s AND occurred_at >= %(since)s AND occurred_at <= %(until)s
ORDER BY occurred_at, id
LIMIT %(limit)s;

-- name: delivery_of
SELECT * FROM lockgate_deliveries WHERE event_id = %(event_id)s AND trigger_name = %(trigger_name)s;

-- name: last_replay
SELECT max(replay) AS replay FROM lockgate_replays WHERE event_id = %(event_id)s AND trigger_name = %(trigger_name)s;

-- name: insert_replay
INSERT INTO lockgate_replays (id, event_id, trigger_name, workflow, replay, status, reason, idempotency_key,
    outcome, run_id, ticket, created_at, delivered_at)
VALUES (%(id)s, %(event_id)s, %(trigger_name)s, %(workflow)s, %(replay)s, %(status)s, %(reason)s,
    %(idempotency_key)s, %(outcome)s, %(run_id)s, %(ticket)s, %(now)s, %(now)s)
ON CONFLICT (event_id, trigger_name, replay) DO NOTHING
RETURNING id;

-- name: list_replays
SELECT * FROM lockgate_replays WHERE event_id = %(event_id)s ORDER BY trigger_name, replay;

-- name: forget_replays
DELETE FROM lockgate_replays WHERE id IN (
    SELECT id FROM lockgate_replays WHERE created_at < %(cutoff)s LIMIT %(limit)s
)
RETURNING id;
