-- Step flow control (store/flow.py): key limits, slots and waiters, rate windows.

-- name: stepflow_state
-- Everything a decision on one key reads, in one statement: its limits, its pause, the slots held, the
-- starts in its window (and the oldest of them), the asking step's own place, if any, and the waiters ahead
-- of it (stepflow_held_ahead's count, up to %(cap)s; under a weighted key stepflow_ahead's).
-- Each run is read by its id behind OFFSET 0 (see stepflow_heads).
SELECT k.key, k.rate, k.period, k.parallelism, k.declared, k.burst, k.weighted,
    (SELECT COUNT(*) FROM lockgate_pauses
     WHERE scope = 'key:' || k.key AND (until IS NULL OR until > %(now)s)) AS paused,
    (SELECT MAX(COALESCE(until, 1e308)) FROM lockgate_pauses
     WHERE scope = 'key:' || k.key AND (until IS NULL OR until > %(now)s)) AS paused_until,
    (SELECT COUNT(*) FROM lockgate_flow_slots s
     CROSS JOIN LATERAL (SELECT status, owner, epoch, lease_until FROM lockgate_runs WHERE id = s.run_id OFFSET 0) r
     WHERE s.key = k.key AND s.state = 'running' AND r.status = 'running' AND r.owner IS NOT NULL
       AND r.epoch = s.epoch AND r.lease_until >= %(now)s) AS running,
    (SELECT COUNT(*) FROM lockgate_flow_starts WHERE key = k.key AND at > %(now)s - k.period) AS started,
    (SELECT MIN(at) FROM lockgate_flow_starts WHERE key = k.key AND at > %(now)s - k.period) AS oldest,
    m.id AS my_id, m.state AS my_state, m.waiting_since AS my_since, m.priority AS my_priority,
    m.attempt AS my_attempt, m.first_at AS my_first, m.epoch AS my_epoch, m.started_at AS my_started,
    m.held_epoch AS my_held,
    CASE WHEN k.weighted = 1 THEN (SELECT COUNT(*) FROM (
        SELECT 1 FROM lockgate_flow_slots w
        CROSS JOIN LATERAL (SELECT status FROM lockgate_runs WHERE id = w.run_id OFFSET 0) wr
        WHERE w.key = k.key AND w.state = 'waiting' AND wr.status = 'running'
          AND (m.state IS DISTINCT FROM 'waiting' OR w.priority > m.priority OR (w.priority = m.priority AND w.id < m.id))
          AND NOT (w.run_id = %(run_id)s AND w.step_key = %(step_key)s)
        LIMIT %(cap)s) AS line)
    ELSE (SELECT COUNT(*) FROM (
        SELECT 1 FROM lockgate_flow_slots w
        CROSS JOIN LATERAL (
            SELECT status, owner, epoch, lease_until FROM lockgate_runs WHERE id = w.run_id OFFSET 0
        ) wr
        WHERE w.key = k.key AND w.state = 'waiting' AND w.held_epoch IS NOT NULL
          AND wr.status = 'running' AND wr.owner IS NOT NULL AND wr.epoch = w.held_epoch
          AND wr.lease_until >= %(now)s
          AND (m.state IS DISTINCT FROM 'waiting' OR w.priority > m.priority OR (w.priority = m.priority AND w.id < m.id))
          AND NOT (w.run_id = %(run_id)s AND w.step_key = %(step_key)s)
        LIMIT %(cap)s) AS line) END AS ahead
FROM lockgate_flow_keys k
LEFT JOIN lockgate_flow_slots m ON m.key = k.key AND m.run_id = %(run_id)s AND m.step_key = %(step_key)s
WHERE k.key = %(key)s;

-- name: stepflow_locked
-- A round trip: the key's lock, sent before it, is held once this answers.
SELECT 1 AS locked;

-- name: stepflow_declare_key
-- silent: run for its effect; nothing waits for its answer
-- A declaration reaching a key: the key's first sets its limits; a later, different one changes them,
-- unless an operator set them (declared NULL).
INSERT INTO lockgate_flow_keys (key, rate, period, parallelism, declared, updated_at)
VALUES (%(key)s, %(rate)s, %(period)s, %(parallelism)s, %(declared)s, %(now)s)
ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, period = excluded.period,
    parallelism = excluded.parallelism, declared = excluded.declared, updated_at = excluded.updated_at
WHERE lockgate_flow_keys.declared IS NOT NULL AND lockgate_flow_keys.declared <> excluded.declared;

-- name: stepflow_set_key
-- silent: run for its effect; nothing waits for its answer
INSERT INTO lockgate_flow_keys (key, rate, period, parallelism, declared, updated_at)
VALUES (%(key)s, %(rate)s, %(period)s, %(parallelism)s, NULL, %(now)s)
ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, period = excluded.period,
    parallelism = excluded.parallelism, declared = NULL, updated_at = excluded.updated_at;

-- name: stepflow_get_key
SELECT key, rate, period, parallelism, declared, updated_at, burst, weighted FROM lockgate_flow_keys WHERE key = %(key)s;

-- name: stepflow_started
SELECT COUNT(*) AS n, MIN(at) AS oldest FROM lockgate_flow_starts WHERE key = %(key)s AND at > %(since)s;

-- name: stepflow_nth_start
-- The start whose leaving the window makes room for one more (the window holds %(offset)s + 1 too many).
SELECT at FROM lockgate_flow_starts WHERE key = %(key)s AND at > %(since)s ORDER BY at LIMIT 1 OFFSET %(offset)s;

-- name: stepflow_add_start
-- silent: run for its effect; nothing waits for its answer
INSERT INTO lockgate_flow_starts (key, at) VALUES (%(key)s, %(at)s);

-- name: stepflow_add_handed_start
-- silent: run for its effect; nothing waits for its answer
-- A start granted by a hand-off, naming its slot (stepflow_unhand_starts takes it back).
INSERT INTO lockgate_flow_starts (key, at, slot_id) VALUES (%(key)s, %(at)s, %(slot)s);

-- name: stepflow_prune_starts
-- silent: run for its effect; nothing waits for its answer
DELETE FROM lockgate_flow_starts WHERE key = %(key)s AND at <= %(before)s;

-- name: stepflow_get_slot
SELECT id, state, epoch, waiting_since, priority FROM lockgate_flow_slots
WHERE key = %(key)s AND run_id = %(run_id)s AND step_key = %(step_key)s;

-- name: stepflow_ahead
-- Waiters of live runs that start before the given place in line (counted up to %(room)s): a weighted key's
-- line is served strictly in order.
SELECT COUNT(*) AS n FROM (
    SELECT 1 FROM lockgate_flow_slots s
    CROSS JOIN LATERAL (SELECT status FROM lockgate_runs WHERE id = s.run_id OFFSET 0) AS r
    WHERE s.key = %(key)s AND s.state = 'waiting' AND r.status = 'running'
      AND (%(id)s::bigint IS NULL OR s.priority > %(priority)s OR (s.priority = %(priority)s AND s.id < %(id)s))
      AND NOT (s.run_id = %(run_id)s AND s.step_key = %(step_key)s)
    LIMIT %(room)s) AS line;

-- name: stepflow_held_ahead
-- Steps waiting in place in their workers (under the hold they asked with) that start before the given place
-- in line, counted up to %(room)s from the held waiters' index: a slot never waits for a parked run ahead to be
-- claimed (it is woken, and takes the next one), and the parked ones are not read.
SELECT COUNT(*) AS n FROM (
    SELECT 1 FROM lockgate_flow_slots s
    CROSS JOIN LATERAL (SELECT status, owner, epoch, lease_until FROM lockgate_runs WHERE id = s.run_id OFFSET 0) AS r
    WHERE s.key = %(key)s AND s.state = 'waiting' AND s.held_epoch IS NOT NULL
      AND r.status = 'running' AND r.owner IS NOT NULL AND r.epoch = s.held_epoch AND r.lease_until >= %(now)s
      AND (%(id)s::bigint IS NULL OR s.priority > %(priority)s OR (s.priority = %(priority)s AND s.id < %(id)s))
      AND NOT (s.run_id = %(run_id)s AND s.step_key = %(step_key)s)
    LIMIT %(room)s) AS line;

-- name: stepflow_add_waiter
-- silent: run for its effect; nothing waits for its answer
-- The step waits in place under the asking hold (%(epoch)s), until its run parks.
INSERT INTO lockgate_flow_slots (key, run_id, step_key, priority, state, waiting_since, attempt, first_at, held_epoch)
VALUES (%(key)s, %(run_id)s, %(step_key)s, %(priority)s, 'waiting', %(now)s, %(attempt)s, %(first)s, %(epoch)s);

-- name: stepflow_join_line
-- silent: run for its effect; nothing waits for its answer
-- A step takes the last place in its key's line without a decision, waiting in place under the asking hold
-- (%(epoch)s): a step of its worker waits in place ahead of it (store/flow_line.py). A step that has a place
-- already (its run lost its hold) waits in place at that place.
INSERT INTO lockgate_flow_slots (key, run_id, step_key, priority, state, waiting_since, attempt, first_at, held_epoch)
VALUES (%(key)s, %(run_id)s, %(step_key)s, %(priority)s, 'waiting', %(now)s, %(attempt)s, %(first)s, %(epoch)s)
ON CONFLICT (key, run_id, step_key) DO UPDATE SET held_epoch = excluded.held_epoch
WHERE lockgate_flow_slots.state = 'waiting';

-- name: stepflow_hold_place
-- silent: run for its effect; nothing waits for its answer
-- A step asks again from its place in line under a new hold (its run was claimed again): it waits in place now.
UPDATE lockgate_flow_slots SET held_epoch = %(epoch)s WHERE id = %(id)s;

-- name: stepflow_unhold
-- silent: run for its effect; nothing waits for its answer
-- A run parks: its steps keep their places in line, no longer waiting in a worker.
UPDATE lockgate_flow_slots SET held_epoch = NULL WHERE key = %(key)s AND run_id = %(run_id)s AND held_epoch IS NOT NULL;

-- name: stepflow_take_slot
-- silent: run for its effect; nothing waits for its answer
INSERT INTO lockgate_flow_slots (key, run_id, step_key, priority, state, epoch, waiting_since, started_at)
VALUES (%(key)s, %(run_id)s, %(step_key)s, %(priority)s, 'running', %(epoch)s, %(now)s, %(now)s)
ON CONFLICT (key, run_id, step_key) DO UPDATE SET state = 'running', epoch = excluded.epoch,
    started_at = excluded.started_at;

-- name: stepflow_fence
-- The run as the asking hold has it (owner and epoch), still running: else that hold lost its lease, and a slot
-- it took, or a waiting row it wrote, would stand for the run's next hold.
SELECT 1 AS held FROM lockgate_runs
WHERE id = %(run_id)s AND owner = %(owner)s AND epoch = %(epoch)s AND status = 'running';

-- name: stepflow_release_slot
-- silent: run for its effect; nothing waits for its answer
-- The slot of an attempt that ended, if it is still that hold's: a late release by a hold whose lease was lost
-- (a zombie) leaves the run's next hold's slot, or its place in line, alone.
DELETE FROM lockgate_flow_slots WHERE key = %(key)s AND run_id = %(run_id)s AND step_key = %(step_key)s
  AND state = 'running' AND epoch = %(epoch)s;

-- name: stepflow_free_slot
-- silent: run for its effect; nothing waits for its answer
DELETE FROM lockgate_flow_slots WHERE key = %(key)s AND run_id = %(run_id)s AND step_key = %(step_key)s;

-- name: stepflow_wake_waiters
-- silent: run for its effect; who was woken is not waited for (the caller knows it asked)
-- The first %(n)s waiters of live runs: those parked are runnable from %(at)s. Only the parked ones' rows are
-- locked, and one another transaction holds is skipped, never waited for (this one holds the key's lock):
-- that one is claiming it (it will ask for a slot itself), parking it (it looks for room under the key's
-- lock next) or ending it. A run held by a worker is never locked here: its holder's writes never wait.
-- The line is read once (each run by its id, as stepflow_heads reads it), then each of its first parked runs
-- by its id (a plan that walked the runs would grow with every parked run).
WITH heads AS MATERIALIZED (
    SELECT s.run_id, r.owner, r.wake_at FROM lockgate_flow_slots s
    CROSS JOIN LATERAL (SELECT status, owner, wake_at FROM lockgate_runs WHERE id = s.run_id OFFSET 0) AS r
    WHERE s.key = %(key)s AND s.state = 'waiting' AND r.status = 'running'
    ORDER BY s.priority DESC, s.id LIMIT %(n)s
), parked AS (
    SELECT r.id FROM heads h, LATERAL (
        SELECT id FROM lockgate_runs
        WHERE id = h.run_id AND status = 'running' AND owner IS NULL AND (wake_at IS NULL OR wake_at > %(at)s)
        FOR UPDATE SKIP LOCKED
    ) AS r
    WHERE h.owner IS NULL AND (h.wake_at IS NULL OR h.wake_at > %(at)s)  -- held ones are not looked at again
)
UPDATE lockgate_runs SET wake_at = %(at)s, updated_at = %(now)s
WHERE id IN (SELECT id FROM parked)
RETURNING id;

-- name: stepflow_drop_dead_waiters
-- silent: run for its effect; nothing waits for its answer
DELETE FROM lockgate_flow_slots
WHERE key = %(key)s AND run_id IN (
    SELECT s.run_id FROM lockgate_flow_slots s JOIN lockgate_runs r ON r.id = s.run_id
    WHERE s.key = %(key)s AND r.status IN ('succeeded', 'failed', 'cancelled'));

-- name: forget_flow_slots
-- Retention: the places of runs it forgets (retention.RUN_RECORDS).
DELETE FROM lockgate_flow_slots WHERE run_id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: stepflow_parked_runs
SELECT workflow, COUNT(*) AS n FROM lockgate_runs
WHERE status = 'running' AND waiting_on = 'flow' AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
GROUP BY workflow;

-- name: stepflow_heads
-- The first %(n)s of the key's line (waiters of live runs), with what a hand-off needs of each run: held by a
-- worker (owner, epoch, lease) or parked (wake_at). Each run is read by its id behind OFFSET 0, which keeps
-- the status test outside: joined plainly, a planner without statistics (a table filled since its last
-- ANALYZE) may answer ``status = 'running'`` from the partial runnable index and read every live run per waiter.
SELECT s.id, s.run_id, s.step_key, s.waiting_since, s.attempt, s.first_at, r.owner, r.epoch, r.lease_until, r.wake_at
FROM lockgate_flow_slots s
CROSS JOIN LATERAL (
    SELECT status, owner, epoch, lease_until, wake_at FROM lockgate_runs WHERE id = s.run_id OFFSET 0
) AS r
WHERE s.key = %(key)s AND s.state = 'waiting' AND r.status = 'running'
ORDER BY s.priority DESC, s.id LIMIT %(n)s;

-- name: stepflow_held_heads
-- The first %(n)s steps of the key's line that wait in place in their workers (stepflow_held_ahead's), from the
-- held waiters' index: a freed slot goes to the first of them however many parked runs are ahead.
SELECT s.id, s.run_id, s.step_key, s.waiting_since, s.attempt, s.first_at, r.owner, r.epoch, r.lease_until, r.wake_at
FROM lockgate_flow_slots s
CROSS JOIN LATERAL (
    SELECT status, owner, epoch, lease_until, wake_at FROM lockgate_runs WHERE id = s.run_id OFFSET 0
) AS r
WHERE s.key = %(key)s AND s.state = 'waiting' AND s.held_epoch IS NOT NULL
  AND r.status = 'running' AND r.owner IS NOT NULL AND r.epoch = s.held_epoch AND r.lease_until >= %(now)s
ORDER BY s.priority DESC, s.id LIMIT %(n)s;

-- name: stepflow_grant
-- silent: run for its effect; nothing waits for its answer
-- A slot handed to a waiter whose run a worker holds: it counts under that hold's epoch, as a slot taken does.
UPDATE lockgate_flow_slots SET state = 'running', epoch = %(epoch)s, started_at = %(now)s
WHERE id = %(id)s AND state = 'waiting';

-- name: stepflow_requeue
-- silent: run for its effect; nothing waits for its answer
-- A slot handed to (or taken by) an earlier hold of the run that ended before the step ran: waiting again,
-- at its place in line.
UPDATE lockgate_flow_slots SET state = 'waiting', epoch = NULL, started_at = NULL WHERE id = %(id)s;

-- name: stepflow_unhand_starts
-- silent: run for its effect; nothing waits for its answer
-- A run parks before a step handed a slot ran: the start its grant counted goes (runs before stepflow_unhand).
DELETE FROM lockgate_flow_starts f USING lockgate_flow_slots s
WHERE s.key = %(key)s AND s.run_id = %(run_id)s AND s.state = 'running'
  AND f.key = s.key AND f.at = s.started_at AND f.slot_id = s.id;

-- name: stepflow_unhand
-- silent: run for its effect; nothing waits for its answer
-- A run parks: a slot handed to one of its steps meanwhile goes back to the line, the step at its place.
UPDATE lockgate_flow_slots SET state = 'waiting', epoch = NULL, started_at = NULL
WHERE key = %(key)s AND run_id = %(run_id)s AND state = 'running';

-- name: stepflow_handed
-- Which steps of the given runs hold a slot (a worker told of a hand-off reads which of its waiters it was for).
SELECT s.key, s.run_id, s.step_key, s.epoch, s.waiting_since, s.started_at, s.attempt, s.first_at
FROM lockgate_flow_slots s WHERE s.run_id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb))) AND s.state = 'running';

-- name: stepflow_notify
-- silent: run for its effect; nothing waits for its answer
-- A slot handed to a waiter another worker holds ('flow'), or its turn come ('flow-ask'): that worker is told
-- (the payload names it) at commit.
SELECT pg_notify('lockgate', json_build_array(
    COALESCE(current_setting('lockgate.origin', true), ''), %(channel)s::text, %(owner)s::text)::text);

-- name: stepflow_set_burst
-- A key's burst, as the declaration that holds its limits gives it (:declared NULL: as set by hand).
UPDATE lockgate_flow_keys SET burst = %(burst)s
WHERE key = %(key)s AND (declared = %(declared)s OR (declared IS NULL AND %(declared)s::text IS NULL));
