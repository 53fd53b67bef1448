-- What `lockgate doctor` reads (store/doctor.py): one-shot health questions, each a bounded read.
-- Kept in lockstep with sql/postgres/doctor.sql.

-- name: doctor_migrations
SELECT version, name, applied_at FROM lockgate_migrations ORDER BY version;

-- name: doctor_stalled
-- Running runs with no progress since :before and no timer still to come (what the staleness sweep reports).
SELECT id, workflow, waiting_on, progress_at, owner FROM lockgate_runs
WHERE status = 'running' AND progress_at < :before
  AND NOT (wake_at IS NOT NULL AND wake_at > :now AND owner IS NULL)
ORDER BY progress_at LIMIT :limit;

-- name: doctor_crashlooped
SELECT id, workflow, updated_at FROM lockgate_runs
WHERE status = 'suspended' AND error_tag = 'WorkflowCrashLooped'
ORDER BY updated_at LIMIT :limit;

-- name: doctor_overdue_parked
-- Parked starts past their start timeout: the drainer expires them, so any left say it is not running.
SELECT workflow, COUNT(*) AS parked, MIN(first_at) AS oldest, MIN(expires_at) AS expired_at
FROM lockgate_pending WHERE expires_at IS NOT NULL AND expires_at < :before
GROUP BY workflow ORDER BY MIN(first_at);

-- name: doctor_orphaned_slots
-- Concurrency slots whose run has ended or is gone: a budget nobody uses and nobody frees.
SELECT s.run_id, s.workflow, s.scope, s.key, s.acquired_at, r.status
FROM lockgate_slots s LEFT JOIN lockgate_runs r ON r.id = s.run_id
WHERE r.id IS NULL OR r.status IN ('succeeded', 'failed', 'cancelled')
ORDER BY s.acquired_at LIMIT :limit;

-- name: doctor_schedules
-- Declared schedules, judged against the code that declares them (runtime ones: doctor_schedules_behind).
SELECT name, workflow, paused, orphaned_at, watermark FROM lockgate_schedules WHERE origin = 'declared'
ORDER BY name;

-- name: doctor_schedules_behind
-- Runtime schedules the sweep has not looked at since cutoff, by the index on next_at.
SELECT name, workflow, next_at FROM lockgate_schedules WHERE next_at < :cutoff AND origin = 'runtime'
ORDER BY next_at LIMIT :limit;

-- name: doctor_retention_backlog
-- Runs ended before the cutoff that retention should have forgotten: those created before :created_before (the
-- cutoff, or where the run history is partitioned the oldest partition not yet due: store/doctor.py).
SELECT COUNT(*) AS runs, MIN(finished_at) AS oldest FROM lockgate_runs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND created_at < :created_before AND finished_at < :cutoff;

-- name: doctor_store_size
SELECT (SELECT page_count FROM pragma_page_count()) * (SELECT page_size FROM pragma_page_size()) AS bytes;

-- name: doctor_runnable
-- Runs due to be executed now: what a live worker would claim.
SELECT COUNT(*) AS runs FROM lockgate_runs WHERE status = 'running' AND wake_at IS NOT NULL AND wake_at <= :now;
