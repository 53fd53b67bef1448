-- name: upsert_worker
INSERT INTO lockgate_workers (id, host, pid, started_at, heartbeat_at)
VALUES (:id, :host, :pid, :now, :now)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, stopped_at = NULL;

-- name: heartbeat
UPDATE lockgate_workers SET heartbeat_at = :now, clock_offset = :clock_offset WHERE id = :id;

-- name: stop_worker
UPDATE lockgate_workers SET stopped_at = :now, heartbeat_at = :now WHERE id = :id;

-- name: list_workers
SELECT w.*, (SELECT COUNT(*) FROM lockgate_runs r WHERE r.owner = w.id AND r.status = 'running') AS runs_held
FROM lockgate_workers w ORDER BY w.started_at;

-- name: live_workers_on_host
SELECT id, pid FROM lockgate_workers WHERE host = :host AND stopped_at IS NULL AND id <> :id;

-- name: sweep_lease
-- A sweep's lease as committed, read without a lock: a replica that sees another's live lease stands down
-- without the upsert below, which would lock the row (waiting for whoever holds it) until its commit.
SELECT owner, lease_until FROM lockgate_sweep_leases WHERE name = :name;

-- name: acquire_sweep
INSERT INTO lockgate_sweep_leases (name, owner, lease_until, ticks) VALUES (:name, :owner, :lease_until, 1)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until,
    ticks = lockgate_sweep_leases.ticks + 1
WHERE lockgate_sweep_leases.owner = excluded.owner OR lockgate_sweep_leases.lease_until < :now
RETURNING owner;

-- name: list_sweeps
SELECT * FROM lockgate_sweep_leases ORDER BY name;

-- name: set_worker_lease
UPDATE lockgate_workers SET lease = :lease, clock_offset = :clock_offset, labels = :labels,
    offers = :offers
WHERE id = :id;

-- name: live_offers
-- What the live workers take (a stopped one, or one whose heartbeat is older than its lease, takes nothing).
SELECT id, labels, offers, origin FROM lockgate_workers
WHERE stopped_at IS NULL AND heartbeat_at >= :now - COALESCE(lease, :default_lease);

-- name: release_owner
UPDATE lockgate_runs SET owner = NULL, lease_until = NULL,
    entered_at = CASE WHEN :clean = 1 THEN NULL ELSE entered_at END
WHERE owner = :owner AND status = 'running'
RETURNING id;

-- name: renew_held
-- Only the runs this worker executes, each at the epoch it holds (see the PostgreSQL twin).
UPDATE lockgate_runs SET lease_until = :lease_until
WHERE owner = :owner AND status = 'running' AND lease_until >= :now
  AND id IN (SELECT key FROM json_each(:held)) AND epoch = json_extract(:held, '$."' || id || '"')
RETURNING id, epoch;

-- name: unheld_runs
SELECT id, epoch FROM lockgate_runs
WHERE owner = :owner AND status = 'running' AND COALESCE(entered_at, 0) < :before
  AND id NOT IN (SELECT key FROM json_each(:held));

-- name: release_unheld
UPDATE lockgate_runs SET owner = NULL, lease_until = NULL
WHERE owner = :owner AND status = 'running'
  AND id IN (SELECT key FROM json_each(:suspects)) AND epoch = json_extract(:suspects, '$."' || id || '"')
  AND id NOT IN (SELECT key FROM json_each(:held))
RETURNING id;

-- name: database_clock
-- One machine's clock: every process on a SQLite file reads the same one.
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now;
