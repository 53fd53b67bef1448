-- name: upsert_worker
INSERT INTO lockgate_workers (id, host, pid, started_at, heartbeat_at)
VALUES (%(id)s, %(host)s, %(pid)s, %(now)s, %(now)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, stopped_at = NULL;

-- name: heartbeat
UPDATE lockgate_workers SET heartbeat_at = %(now)s, clock_offset = %(clock_offset)s WHERE id = %(id)s;

-- name: stop_worker
UPDATE lockgate_workers SET stopped_at = %(now)s, heartbeat_at = %(now)s WHERE id = %(id)s;

-- name: list_workers
SELECT w.*, (SELECT COUNT(*) FROM lockgate_runs r WHERE r.owner = w.id AND r.status = 'running') AS runs_held
FROM lockgate_workers w ORDER BY w.started_at;

-- name: live_workers_on_host
SELECT id, pid FROM lockgate_workers WHERE host = %(host)s AND stopped_at IS NULL AND id <> %(id)s;

-- name: sweep_lease
-- A sweep's lease as committed, read without a lock: a replica that sees another's live lease stands down
-- without the upsert below, which would lock the row (waiting for whoever holds it) until its commit.
SELECT owner, lease_until FROM lockgate_sweep_leases WHERE name = %(name)s;

-- name: acquire_sweep
INSERT INTO lockgate_sweep_leases (name, owner, lease_until, ticks) VALUES (%(name)s, %(owner)s, %(lease_until)s, 1)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until,
    ticks = lockgate_sweep_leases.ticks + 1
WHERE lockgate_sweep_leases.owner = excluded.owner OR lockgate_sweep_leases.lease_until < %(now)s
RETURNING owner;

-- name: list_sweeps
SELECT * FROM lockgate_sweep_leases ORDER BY name;

-- name: set_worker_lease
-- origin: this store's, which its wake-ups name (engine/claim_order.py).
UPDATE lockgate_workers SET lease = %(lease)s, clock_offset = %(clock_offset)s, labels = %(labels)s,
    offers = %(offers)s, origin = current_setting('lockgate.origin', true)
WHERE id = %(id)s;

-- name: live_offers
-- What the live workers take (a stopped one, or one whose heartbeat is older than its lease, takes nothing).
SELECT id, labels, offers, origin FROM lockgate_workers
WHERE stopped_at IS NULL AND heartbeat_at >= %(now)s - COALESCE(lease, %(default_lease)s);

-- name: release_owner
UPDATE lockgate_runs SET owner = NULL, lease_until = NULL,
    entered_at = CASE WHEN %(clean)s::integer = 1 THEN NULL ELSE entered_at END
WHERE owner = %(owner)s AND status = 'running'
RETURNING id;

-- name: renew_held
-- Only the runs this worker executes, each at the epoch it holds: a row that names this worker
-- but is not executed here (a claim whose commit a failover lost) is not kept alive by it. Nor is
-- a lease that lapsed (the worker was frozen or cut off): others counted it gone (its run's step
-- slots among them) and may have used the room; the run is claimed again, at a new epoch.
UPDATE lockgate_runs r SET lease_until = %(lease_until)s
FROM jsonb_each_text(%(held)s::jsonb) AS h(id, epoch)
WHERE r.id = h.id AND r.epoch = h.epoch::bigint AND r.owner = %(owner)s AND r.status = 'running'
  AND r.lease_until >= %(now)s
RETURNING r.id, r.epoch;

-- name: unheld_runs
-- Rows naming this worker that it does not execute, claimed before ``before`` (a claim of an instant
-- ago may not have reached its execution yet): suspects, released if the next heartbeat finds them so.
SELECT id, epoch FROM lockgate_runs
WHERE owner = %(owner)s AND status = 'running' AND COALESCE(entered_at, 0) < %(before)s
  AND NOT (%(held)s::jsonb ? id);

-- name: release_unheld
-- The suspects of the last heartbeat still unheld at the same epoch: released, so that any worker,
-- this one included, resumes them from their journals.
UPDATE lockgate_runs r SET owner = NULL, lease_until = NULL
FROM jsonb_each_text(%(suspects)s::jsonb) AS s(id, epoch)
WHERE r.id = s.id AND r.epoch = s.epoch::bigint AND r.owner = %(owner)s AND r.status = 'running'
  AND NOT (%(held)s::jsonb ? r.id)
RETURNING r.id;

-- name: database_clock
SELECT extract(epoch FROM clock_timestamp())::float8 AS now;
