-- Step flow control (store/flow.py): key limits, slots and waiters, rate windows.

-- name: stepflow_state
-- Everything a decision on one key reads, in one statement: its limits, its pause, the slots held, the
-- starts in its window (and the oldest of them), the asking step's own place, if any, and the waiters ahead
-- of it (stepflow_held_ahead's count, up to :cap; under a weighted key stepflow_ahead's).
SELECT k.key, k.rate, k.period, k.parallelism, k.declared, k.burst, k.weighted,
    (SELECT COUNT(*) FROM lockgate_pauses
     WHERE scope = 'key:' || k.key AND (until IS NULL OR until > :now)) AS paused,
    (SELECT MAX(COALESCE(until, 1e308)) FROM lockgate_pauses
     WHERE scope = 'key:' || k.key AND (until IS NULL OR until > :now)) AS paused_until,
    (SELECT COUNT(*) FROM lockgate_flow_slots s JOIN lockgate_runs r ON r.id = s.run_id
     WHERE s.key = k.key AND s.state = 'running' AND r.status = 'running' AND r.owner IS NOT NULL
       AND r.epoch = s.epoch AND r.lease_until >= :now) AS running,
    (SELECT COUNT(*) FROM lockgate_flow_starts WHERE key = k.key AND at > :now - k.period) AS started,
    (SELECT MIN(at) FROM lockgate_flow_starts WHERE key = k.key AND at > :now - k.period) AS oldest,
    m.id AS my_id, m.state AS my_state, m.waiting_since AS my_since, m.priority AS my_priority,
    m.attempt AS my_attempt, m.first_at AS my_first, m.epoch AS my_epoch, m.started_at AS my_started,
    m.held_epoch AS my_held,
    CASE WHEN k.weighted = 1 THEN (SELECT COUNT(*) FROM (
        SELECT 1 FROM lockgate_flow_slots w JOIN lockgate_runs wr ON wr.id = w.run_id
        WHERE w.key = k.key AND w.state = 'waiting' AND wr.status = 'running'
          AND (m.state IS NOT 'waiting' OR w.priority > m.priority OR (w.priority = m.priority AND w.id < m.id))
          AND NOT (w.run_id = :run_id AND w.step_key = :step_key)
        LIMIT :cap))
    ELSE (SELECT COUNT(*) FROM (
        SELECT 1 FROM lockgate_flow_slots w INDEXED BY lockgate_flow_slots_held JOIN lockgate_runs wr ON wr.id = w.run_id
        WHERE w.key = k.key AND w.state = 'waiting' AND w.held_epoch IS NOT NULL
          AND wr.status = 'running' AND wr.owner IS NOT NULL AND wr.epoch = w.held_epoch AND wr.lease_until >= :now
          AND (m.state IS NOT 'waiting' OR w.priority > m.priority OR (w.priority = m.priority AND w.id < m.id))
          AND NOT (w.run_id = :run_id AND w.step_key = :step_key)
        LIMIT :cap)) END AS ahead
FROM lockgate_flow_keys k
LEFT JOIN lockgate_flow_slots m ON m.key = k.key AND m.run_id = :run_id AND m.step_key = :step_key
WHERE k.key = :key;

-- name: stepflow_locked
-- A round trip: the key's lock, sent before it, is held once this answers.
SELECT 1 AS locked;

-- name: stepflow_declare_key
-- A declaration reaching a key: the key's first sets its limits; a later, different one changes them,
-- unless an operator set them (declared NULL).
INSERT INTO lockgate_flow_keys (key, rate, period, parallelism, declared, updated_at)
VALUES (:key, :rate, :period, :parallelism, :declared, :now)
ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, period = excluded.period,
    parallelism = excluded.parallelism, declared = excluded.declared, updated_at = excluded.updated_at
WHERE lockgate_flow_keys.declared IS NOT NULL AND lockgate_flow_keys.declared <> excluded.declared;

-- name: stepflow_set_key
INSERT INTO lockgate_flow_keys (key, rate, period, parallelism, declared, updated_at)
VALUES (:key, :rate, :period, :parallelism, NULL, :now)
ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, period = excluded.period,
    parallelism = excluded.parallelism, declared = NULL, updated_at = excluded.updated_at;

-- name: stepflow_get_key
SELECT key, rate, period, parallelism, declared, updated_at, burst, weighted FROM lockgate_flow_keys WHERE key = :key;

-- name: stepflow_started
SELECT COUNT(*) AS n, MIN(at) AS oldest FROM lockgate_flow_starts WHERE key = :key AND at > :since;

-- name: stepflow_nth_start
-- The start whose leaving the window makes room for one more (the window holds :offset + 1 too many).
SELECT at FROM lockgate_flow_starts WHERE key = :key AND at > :since ORDER BY at LIMIT 1 OFFSET :offset;

-- name: stepflow_add_start
INSERT INTO lockgate_flow_starts (key, at) VALUES (:key, :at);

-- name: stepflow_add_handed_start
-- A start granted by a hand-off, naming its slot (stepflow_unhand_starts takes it back).
INSERT INTO lockgate_flow_starts (key, at, slot_id) VALUES (:key, :at, :slot);

-- name: stepflow_prune_starts
DELETE FROM lockgate_flow_starts WHERE key = :key AND at <= :before;

-- name: stepflow_get_slot
SELECT id, state, epoch, waiting_since, priority FROM lockgate_flow_slots
WHERE key = :key AND run_id = :run_id AND step_key = :step_key;

-- name: stepflow_ahead
-- Waiters of live runs that start before the given place in line (counted up to :room): a weighted key's line
-- is served strictly in order.
SELECT COUNT(*) AS n FROM (
    SELECT 1 FROM lockgate_flow_slots s JOIN lockgate_runs r ON r.id = s.run_id
    WHERE s.key = :key AND s.state = 'waiting' AND r.status = 'running'
      AND (:id IS NULL OR s.priority > :priority OR (s.priority = :priority AND s.id < :id))
      AND NOT (s.run_id = :run_id AND s.step_key = :step_key)
    LIMIT :room);

-- name: stepflow_held_ahead
-- Steps waiting in place in their workers (under the hold they asked with) that start before the given place
-- in line, counted up to :room from the held waiters' index: a slot never waits for a parked run ahead to be
-- claimed (it is woken, and takes the next one), and the parked ones are not read.
SELECT COUNT(*) AS n FROM (
    SELECT 1 FROM lockgate_flow_slots s INDEXED BY lockgate_flow_slots_held JOIN lockgate_runs r ON r.id = s.run_id
    WHERE s.key = :key AND s.state = 'waiting' AND s.held_epoch IS NOT NULL
      AND r.status = 'running' AND r.owner IS NOT NULL AND r.epoch = s.held_epoch AND r.lease_until >= :now
      AND (:id IS NULL OR s.priority > :priority OR (s.priority = :priority AND s.id < :id))
      AND NOT (s.run_id = :run_id AND s.step_key = :step_key)
    LIMIT :room);

-- name: stepflow_add_waiter
-- The step waits in place under the asking hold (:epoch), until its run parks.
INSERT INTO lockgate_flow_slots (key, run_id, step_key, priority, state, waiting_since, attempt, first_at, held_epoch)
VALUES (:key, :run_id, :step_key, :priority, 'waiting', :now, :attempt, :first, :epoch);

-- name: stepflow_join_line
-- A step takes the last place in its key's line without a decision, waiting in place under the asking hold
-- (:epoch): a step of its worker waits in place ahead of it (store/flow_line.py). Nothing when it has a
-- place already.
INSERT INTO lockgate_flow_slots (key, run_id, step_key, priority, state, waiting_since, attempt, first_at, held_epoch)
VALUES (:key, :run_id, :step_key, :priority, 'waiting', :now, :attempt, :first, :epoch)
ON CONFLICT (key, run_id, step_key) DO NOTHING;

-- name: stepflow_hold_place
-- A step asks again from its place in line under a new hold (its run was claimed again): it waits in place now.
UPDATE lockgate_flow_slots SET held_epoch = :epoch WHERE id = :id;

-- name: stepflow_unhold
-- A run parks: its steps keep their places in line, no longer waiting in a worker.
UPDATE lockgate_flow_slots SET held_epoch = NULL WHERE key = :key AND run_id = :run_id AND held_epoch IS NOT NULL;

-- name: stepflow_take_slot
INSERT INTO lockgate_flow_slots (key, run_id, step_key, priority, state, epoch, waiting_since, started_at)
VALUES (:key, :run_id, :step_key, :priority, 'running', :epoch, :now, :now)
ON CONFLICT (key, run_id, step_key) DO UPDATE SET state = 'running', epoch = excluded.epoch,
    started_at = excluded.started_at;

-- name: stepflow_fence
-- The run as the asking hold has it (owner and epoch), still running: else that hold lost its lease, and a slot
-- it took, or a waiting row it wrote, would stand for the run's next hold.
SELECT 1 AS held FROM lockgate_runs
WHERE id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'running';

-- name: stepflow_release_slot
-- silent: run for its effect; nothing waits for its answer
-- The slot of an attempt that ended, if it is still that hold's: a late release by a hold whose lease was lost
-- (a zombie) leaves the run's next hold's slot, or its place in line, alone.
DELETE FROM lockgate_flow_slots WHERE key = :key AND run_id = :run_id AND step_key = :step_key
  AND state = 'running' AND epoch = :epoch;

-- name: stepflow_free_slot
DELETE FROM lockgate_flow_slots WHERE key = :key AND run_id = :run_id AND step_key = :step_key;

-- name: stepflow_wake_waiters
-- The first :n waiters of live runs, parked: runnable from :at.
UPDATE lockgate_runs SET wake_at = :at, updated_at = :now
WHERE id IN (
    SELECT s.run_id FROM lockgate_flow_slots s JOIN lockgate_runs r ON r.id = s.run_id
    WHERE s.key = :key AND s.state = 'waiting' AND r.status = 'running'
    ORDER BY s.priority DESC, s.id LIMIT :n)
  AND status = 'running' AND owner IS NULL AND (wake_at IS NULL OR wake_at > :at)
RETURNING id;

-- name: stepflow_drop_dead_waiters
DELETE FROM lockgate_flow_slots
WHERE key = :key AND run_id IN (
    SELECT s.run_id FROM lockgate_flow_slots s JOIN lockgate_runs r ON r.id = s.run_id
    WHERE s.key = :key AND r.status IN ('succeeded', 'failed', 'cancelled'));

-- name: forget_flow_slots
-- Retention: the places of runs it forgets (retention.RUN_RECORDS).
DELETE FROM lockgate_flow_slots WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: stepflow_parked_runs
SELECT workflow, COUNT(*) AS n FROM lockgate_runs
WHERE status = 'running' AND waiting_on = 'flow' AND (:workflow IS NULL OR workflow = :workflow)
GROUP BY workflow;

-- name: stepflow_heads
-- The first :n of the key's line (waiters of live runs), with what a hand-off needs of each run: held by a
-- worker (owner, epoch, lease) or parked (wake_at).
SELECT s.id, s.run_id, s.step_key, s.waiting_since, s.attempt, s.first_at, r.owner, r.epoch, r.lease_until, r.wake_at
FROM lockgate_flow_slots s JOIN lockgate_runs r ON r.id = s.run_id
WHERE s.key = :key AND s.state = 'waiting' AND r.status = 'running'
ORDER BY s.priority DESC, s.id LIMIT :n;

-- name: stepflow_held_heads
-- The first :n steps of the key's line that wait in place in their workers (stepflow_held_ahead's), from the
-- held waiters' index: a freed slot goes to the first of them however many parked runs are ahead.
SELECT s.id, s.run_id, s.step_key, s.waiting_since, s.attempt, s.first_at, r.owner, r.epoch, r.lease_until, r.wake_at
FROM lockgate_flow_slots s INDEXED BY lockgate_flow_slots_held JOIN lockgate_runs r ON r.id = s.run_id
WHERE s.key = :key AND s.state = 'waiting' AND s.held_epoch IS NOT NULL
  AND r.status = 'running' AND r.owner IS NOT NULL AND r.epoch = s.held_epoch AND r.lease_until >= :now
ORDER BY s.priority DESC, s.id LIMIT :n;

-- name: stepflow_grant
-- A slot handed to a waiter whose run a worker holds: it counts under that hold's epoch, as a slot taken does.
UPDATE lockgate_flow_slots SET state = 'running', epoch = :epoch, started_at = :now
WHERE id = :id AND state = 'waiting';

-- name: stepflow_requeue
-- A slot handed to (or taken by) an earlier hold of the run that ended before the step ran: waiting again,
-- at its place in line.
UPDATE lockgate_flow_slots SET state = 'waiting', epoch = NULL, started_at = NULL WHERE id = :id;

-- name: stepflow_unhand_starts
-- A run parks before a step handed a slot ran: the start its grant counted goes (runs before stepflow_unhand).
DELETE FROM lockgate_flow_starts WHERE key = :key AND (slot_id, at) IN (
    SELECT id, started_at FROM lockgate_flow_slots WHERE key = :key AND run_id = :run_id AND state = 'running');

-- name: stepflow_unhand
-- A run parks: a slot handed to one of its steps meanwhile goes back to the line, the step at its place.
UPDATE lockgate_flow_slots SET state = 'waiting', epoch = NULL, started_at = NULL
WHERE key = :key AND run_id = :run_id AND state = 'running';

-- name: stepflow_handed
-- Which steps of the given runs hold a slot (a worker told of a hand-off reads which of its waiters it was for).
SELECT s.key, s.run_id, s.step_key, s.epoch, s.waiting_since, s.started_at, s.attempt, s.first_at
FROM lockgate_flow_slots s WHERE s.run_id IN (SELECT value FROM json_each(:ids)) AND s.state = 'running';

-- name: stepflow_notify
-- SQLite has no notifications: another process learns of a slot handed to its waiter at its next look.
SELECT :channel AS channel, :owner AS owner WHERE 0;

-- name: stepflow_set_burst
-- A key's burst, as the declaration that holds its limits gives it (:declared NULL: as set by hand).
UPDATE lockgate_flow_keys SET burst = :burst
WHERE key = :key AND (declared = :declared OR (declared IS NULL AND :declared IS NULL));
