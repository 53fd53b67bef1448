-- What the retention sweep forgets (sweeps/retention.py): runs ended before a cutoff with everything
-- recorded about them, ledger rows older than it, workers and pauses long gone. Kept in lockstep with
-- sql/postgres/retention.sql.

-- name: ended_before
-- Up to :limit runs that ended before :cutoff, except those whose parent is still live (it may yet wait
-- for its child). A run that ended before the cutoff was created before it (and before :created_before, the
-- cutoff here, where nothing is partitioned): the by-status index finds them.
SELECT r.id FROM lockgate_runs r
WHERE r.status IN ('succeeded', 'failed', 'cancelled') AND r.created_at < :created_before
  AND r.finished_at < :cutoff
  AND NOT EXISTS (
      SELECT 1 FROM lockgate_runs p
      WHERE p.id = r.parent_id AND p.status NOT IN ('succeeded', 'failed', 'cancelled')
  )
LIMIT :limit;

-- name: forget_journal
DELETE FROM lockgate_journal WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: forget_attempts
DELETE FROM lockgate_step_attempts WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: forget_events
DELETE FROM lockgate_run_events WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: forget_messages
DELETE FROM lockgate_messages WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: forget_stream_chunks
DELETE FROM lockgate_stream_chunks WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: forget_runs
DELETE FROM lockgate_runs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: forget_ledger
-- Only rows already folded into flow()'s counts (a read adds up the rows past the mark itself).
DELETE FROM lockgate_ledger WHERE id IN (
    SELECT id FROM lockgate_ledger
    WHERE at < :cutoff AND id <= (SELECT upto FROM lockgate_flow_counted)
    LIMIT :limit
)
RETURNING id;

-- name: forget_workers
-- Workers not heard from since the cutoff, but the one asking: stopped, or dead long ago (their runs were
-- taken over).
DELETE FROM lockgate_workers WHERE heartbeat_at < :cutoff AND id <> :me RETURNING id;

-- name: forget_pauses
DELETE FROM lockgate_pauses WHERE until IS NOT NULL AND until < :cutoff RETURNING scope;
