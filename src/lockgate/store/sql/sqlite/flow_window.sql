-- Weighted step flow keys (store/flow_window.py): a window that counts units, a start's settlement.
-- A start counts its reservation (units) until it is settled, then what it settled at.

-- name: stepflow_units_used
SELECT COALESCE(SUM(COALESCE(settled, units)), 0) AS n FROM lockgate_flow_starts WHERE key = :key AND at > :since;

-- name: stepflow_units_opening
-- When enough units leave the window for :need more to fit: the start whose leaving (with every one at its
-- instant or before) takes :need units out of it; the window opens a period after it.
SELECT at FROM (
    SELECT at, SUM(COALESCE(settled, units)) OVER (ORDER BY at) AS gone
    FROM lockgate_flow_starts WHERE key = :key AND at > :since) AS w
WHERE gone >= :need ORDER BY at LIMIT 1;

-- name: stepflow_add_units
INSERT INTO lockgate_flow_starts (key, at, units) VALUES (:key, :at, :units);

-- name: stepflow_settle
-- A call settled: the units it really used count in its reservation's place (a start the window left is gone).
UPDATE lockgate_flow_starts SET settled = :units WHERE id = :id AND key = :key;

-- name: stepflow_add_unit_waiter
INSERT INTO lockgate_flow_slots (key, run_id, step_key, priority, state, waiting_since, attempt, first_at, units)
VALUES (:key, :run_id, :step_key, :priority, 'waiting', :now, :attempt, :first, :units);

-- name: stepflow_unit_head
-- The first of a weighted key's line, with the units it asks for and whether its run is held or parked.
SELECT s.id, s.run_id, s.step_key, s.units, r.owner, r.epoch, r.lease_until, r.wake_at
FROM lockgate_flow_slots s JOIN lockgate_runs r ON r.id = s.run_id
WHERE s.key = :key AND s.state = 'waiting' AND r.status = 'running'
ORDER BY s.priority DESC, s.id LIMIT 1;

-- name: stepflow_set_weighted
-- Whether a key counts units: its nature comes from the code that declares it, even under limits set by hand.
UPDATE lockgate_flow_keys SET weighted = :weighted WHERE key = :key AND weighted IS NOT :weighted;

-- name: stepflow_unit_stats
-- The units in a key's window: reserved by calls not yet settled, and settled.
SELECT COALESCE(SUM(CASE WHEN settled IS NULL THEN units END), 0) AS reserved, COALESCE(SUM(settled), 0) AS settled
FROM lockgate_flow_starts WHERE key = :key AND at > :since;

-- What flow-keys reads of every key (flow_window.key_states).

-- name: stepflow_list_keys
SELECT key, rate, period, parallelism, declared, updated_at, burst, weighted FROM lockgate_flow_keys ORDER BY key;

-- name: stepflow_key_pause
SELECT reason, until FROM lockgate_pauses
WHERE scope = 'key:' || :key AND (until IS NULL OR until > :now);

-- name: stepflow_running
-- Slots held: a running row counts while its run is held under the epoch that took it.
SELECT COUNT(*) AS n FROM lockgate_flow_slots s JOIN lockgate_runs r ON r.id = s.run_id
WHERE s.key = :key AND s.state = 'running' AND r.status = 'running' AND r.owner IS NOT NULL
  AND r.epoch = s.epoch AND r.lease_until >= :now;

-- name: stepflow_key_stats
SELECT
    (SELECT COUNT(*) FROM lockgate_flow_slots s JOIN lockgate_runs r ON r.id = s.run_id
     WHERE s.key = :key AND s.state = 'waiting' AND r.status = 'running') AS waiting,
    (SELECT MIN(s.waiting_since) FROM lockgate_flow_slots s JOIN lockgate_runs r ON r.id = s.run_id
     WHERE s.key = :key AND s.state = 'waiting' AND r.status = 'running') AS oldest_waiting;
