-- name: upsert_worker
INSERT INTO lockgate_workers (id, host, pid, started_at, heartbeat_at)
VALUES (%(id)s, %(host)s, %(pid)s, %(now)s, %(now)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, stopped_at = NULL;

-- name: heartbeat
UPDATE lockgate_workers SET heartbeat_at = %(now)s WHERE id = %(id)s;

-- name: stop_worker
UPDATE lockgate_workers SET stopped_at = %(now)s, heartbeat_at = %(now)s WHERE id = %(id)s;

-- name: list_workers
SELECT w.*, (SELECT COUNT(*) FROM lockgate_runs r WHERE r.owner = w.id AND r.status = 'running') AS runs_held
FROM lockgate_workers w ORDER BY w.started_at;

-- name: live_workers_on_host
SELECT id, pid FROM lockgate_workers WHERE host = %(host)s AND stopped_at IS NULL AND id <> %(id)s;

-- name: acquire_sweep
INSERT INTO lockgate_sweep_leases (name, owner, lease_until, ticks) VALUES (%(name)s, %(owner)s, %(lease_until)s, 1)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until,
    ticks = lockgate_sweep_leases.ticks + 1
WHERE lockgate_sweep_leases.owner = excluded.owner OR lockgate_sweep_leases.lease_until < %(now)s
RETURNING owner;

-- name: list_sweeps
SELECT * FROM lockgate_sweep_leases ORDER BY name;

-- name: set_worker_lease
UPDATE lockgate_workers SET lease = %(lease)s WHERE id = %(id)s;

-- name: release_owner
UPDATE lockgate_runs SET owner = NULL, lease_until = NULL,
    entered_at = CASE WHEN %(clean)s::integer = 1 THEN NULL ELSE entered_at END
WHERE owner = %(owner)s AND status = 'running'
RETURNING id;

-- name: renew_leases
UPDATE lockgate_runs SET lease_until = %(lease_until)s
WHERE owner = %(owner)s AND status = 'running'
RETURNING id, epoch;
