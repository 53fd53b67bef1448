-- What the retention sweep forgets (sweeps/retention.py): runs ended before a cutoff with everything
-- recorded about them, ledger rows older than it, workers and pauses long gone. Kept in lockstep with
-- sql/sqlite/retention.sql.

-- name: ended_before
-- Up to %(limit)s runs that ended before %(cutoff)s, except those whose parent is still live (it may yet
-- wait for its child), created before %(created_before)s: the runs older than the oldest partition of one
-- interval (store/history.py per_run_before), whose history sits in the first or the default partition.
-- The later ones go with their partition, by range of run id (lockgate_history_retire, migration 0039):
-- this selection never reads them. The by-status index finds them.
SELECT r.id FROM lockgate_runs r
WHERE r.status IN ('succeeded', 'failed', 'cancelled') AND r.created_at < %(created_before)s
  AND r.finished_at < %(cutoff)s
  AND NOT EXISTS (
      SELECT 1 FROM lockgate_runs p
      WHERE p.id = r.parent_id AND p.status NOT IN ('succeeded', 'failed', 'cancelled')
  )
LIMIT %(limit)s;

-- name: forget_journal
-- The run history (journal, attempts, events) is partitioned by time (migration 0038, docs/history.md): a
-- forgotten run's rows in a time partition go when the sweep drops that partition, once every run it holds
-- was created before the cutoff; only those in the default partition (kept there when their partition was
-- dropped, or written where none was made yet) are deleted here.
DELETE FROM lockgate_journal_kept WHERE run_id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: forget_attempts
DELETE FROM lockgate_step_attempts_kept WHERE run_id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: forget_events
DELETE FROM lockgate_run_events_kept WHERE run_id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: forget_messages
DELETE FROM lockgate_messages WHERE run_id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: forget_stream_chunks
DELETE FROM lockgate_stream_chunks WHERE run_id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: forget_runs
DELETE FROM lockgate_runs WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: forget_ledger
-- flow()'s counts were kept as the rows were inserted (a trigger): they stay as they are. The ledger is
-- partitioned by at (migration 0052): both reads name the cutoff, so that only the partitions before it
-- (the first and the default one: store/history.py ledger_before) are read.
DELETE FROM lockgate_ledger WHERE at < %(cutoff)s AND id = ANY (ARRAY(
    SELECT id FROM lockgate_ledger WHERE at < %(cutoff)s LIMIT %(limit)s
))
RETURNING id;

-- name: forget_workers
-- Workers not heard from since the cutoff, but the one asking: stopped, or dead long ago (their runs were
-- taken over).
DELETE FROM lockgate_workers WHERE heartbeat_at < %(cutoff)s AND id <> %(me)s RETURNING id;

-- name: forget_pauses
DELETE FROM lockgate_pauses WHERE until IS NOT NULL AND until < %(cutoff)s RETURNING scope;
