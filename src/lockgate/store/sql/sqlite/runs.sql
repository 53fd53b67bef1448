-- name: insert_run
-- owner .. entries: a run a blocking start's own engine claims as it creates it (else NULL, 0).
INSERT INTO lockgate_runs (id, workflow, identity, idempotency_key, status, payload, version, patches,
    parent_id, parent_close, retry_of, source, trace_id, subject, ticket, recording, created_at, updated_at, progress_at, wake_at,
    singleton_key, deadline_at, on_failure, slot_scope, slot_key, owner, lease_until, epoch, entered_at, entries,
    flow_control)
VALUES (:id, :workflow, :identity, :idempotency_key, 'running', :payload, :version, :patches,
    :parent_id, :parent_close, :retry_of, :source, :trace_id, :subject, :ticket, :recording, :now, :now, :now, :wake_at,
    :singleton_key, :deadline_at, :on_failure, :slot_scope, :slot_key,
    :owner, :lease_until, :epoch, :entered_at, :entries, :flow_control)
ON CONFLICT (identity) DO NOTHING
RETURNING id;

-- name: get_run
SELECT * FROM lockgate_runs WHERE id = :id;

-- name: lock_run
-- One writer: a send and a park of its run never overlap (the PostgreSQL twin locks the row).
SELECT * FROM lockgate_runs WHERE id = :id;

-- name: get_runs
SELECT * FROM lockgate_runs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: get_run_by_identity
SELECT * FROM lockgate_runs WHERE identity = :identity;

-- name: ended_rows
-- The final rows of those awaited runs that ended: a waiter woken by them needs no read of its own.
SELECT * FROM lockgate_runs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('succeeded', 'failed', 'cancelled');

-- name: list_runs
SELECT * FROM lockgate_runs
WHERE (:workflow IS NULL OR workflow = :workflow)
  AND (:status IS NULL OR status = :status)
  AND (:parent_id IS NULL OR parent_id = :parent_id)
  AND (:source IS NULL OR source = :source)
ORDER BY created_at DESC, id DESC
LIMIT :limit OFFSET :offset;

-- name: count_runs_by_status
-- Counted at each read here (PostgreSQL keeps them by trigger: lockgate_run_counts, empty here).
SELECT workflow, status, COUNT(*) AS n FROM lockgate_runs GROUP BY workflow, status;

-- name: last_successes
-- The newest finished_at of each workflow's succeeded runs still kept: read at a /metrics scrape (one pass
-- over the succeeded runs, like count_runs_by_status over all), never on a run's path.
SELECT workflow, MAX(finished_at) AS at FROM lockgate_runs WHERE status = 'succeeded' GROUP BY workflow;

-- name: fold_run_counts
-- Nothing to fold: SQLite counts its runs at each read (lockgate_run_count_changes stays empty).
SELECT workflow FROM lockgate_run_count_changes WHERE 0;

-- name: claim_runs
-- Only runs this worker takes: each key is a workflow it takes and a version its code runs ('' for
-- none), and a run's recorded patches must all be known to that code (routing.py: claim_filter).
UPDATE lockgate_runs
SET owner = :owner, epoch = epoch + 1, lease_until = :lease_until,
    reclaim_count = CASE WHEN entered_at IS NOT NULL THEN reclaim_count + 1 ELSE 0 END,
    entered_at = :now, entries = entries + 1, updated_at = :now
WHERE id IN (
    SELECT id FROM lockgate_runs
    WHERE status = 'running' AND wake_at <= :now
      AND (owner IS NULL OR (lease_until < :now AND owner <> :owner))
      AND workflow || char(31) || COALESCE(version, '') IN (SELECT value FROM json_each(:keys))
      AND (patches = '[]' OR NOT EXISTS (
          SELECT 1 FROM json_each(patches) p
          WHERE p.value NOT IN (SELECT k.value FROM json_each(:patches, '$."' || workflow || '"') k)))
    ORDER BY wake_at LIMIT :limit)
RETURNING *;

-- name: next_wake
SELECT MIN(CASE WHEN owner IS NULL THEN wake_at WHEN owner = :owner THEN NULL
    ELSE MAX(wake_at, lease_until) END) AS at
FROM lockgate_runs WHERE status = 'running' AND wake_at IS NOT NULL;

-- name: release_run
UPDATE lockgate_runs SET owner = NULL, lease_until = NULL, wake_at = :wake_at
WHERE id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'running';

-- name: park_run
UPDATE lockgate_runs
SET owner = NULL, lease_until = NULL, entered_at = NULL, waiting_on = :waiting_on,
    waiting_for = :waiting_for, updated_at = :now,
    -- a compensating cancel that came while the run was held: due at once, to be entered and cancelled (the
    -- row's mark: the cancel may have held the row while this statement waited, its journal entry unseen)
    wake_at = CASE WHEN cancel_requested = 1
        OR EXISTS (SELECT 1 FROM lockgate_journal j WHERE j.run_id = :run_id AND j.step_key = '$cancel')
        THEN :now ELSE :wake_at END
WHERE id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'running'
RETURNING id, wake_at;

-- name: lock_parent
-- A child's end takes its parent's row first (parent before child, the order a parent's own end takes
-- them in), so that it and the parent's park never miss each other: one waits for the other's commit
-- and then sees it (finish_collecting, park_run). SQLite serializes writers: a plain read.
SELECT p.id FROM lockgate_runs p
WHERE p.id = (SELECT c.parent_id FROM lockgate_runs c WHERE c.id = :run_id);

-- name: pending_for_waits
SELECT 1 AS hit FROM lockgate_messages
WHERE run_id = :run_id AND status = 'pending'
  AND name IN (SELECT value FROM json_each(:names))
UNION ALL
SELECT 1 AS hit FROM lockgate_runs
WHERE id IN (SELECT value FROM json_each(:children)) AND status IN ('succeeded', 'failed', 'cancelled')
LIMIT 1;

-- name: finish_run
UPDATE lockgate_runs
SET status = :status, output = :output, error_tag = :error_tag, error_message = :error_message,
    owner = NULL, lease_until = NULL, entered_at = NULL, wake_at = NULL, waiting_on = NULL,
    waiting_for = NULL, finished_at = CASE WHEN :status IN ('succeeded', 'failed', 'cancelled') THEN :now END,
    updated_at = :now, progress_at = :now
WHERE id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'running'
RETURNING id, workflow, parent_id, payload, slot_scope, on_failure,
    EXISTS (SELECT 1 FROM lockgate_runs c WHERE c.parent_id = lockgate_runs.id
            AND c.status IN ('running', 'suspended')) AS open_children;

-- name: finish_run_plain
-- finish_run for a run whose end asks nothing more (no parent to wake, no open child to close, no failure
-- report); such a run is most runs. With :slotted, a run holding a concurrency slot, freed by the statement
-- after it (gate/handoff.py passes it on); else a run without one. No row changed: finish_run it is.
UPDATE lockgate_runs
SET status = :status, output = :output, error_tag = :error_tag, error_message = :error_message,
    owner = NULL, lease_until = NULL, entered_at = NULL, wake_at = NULL, waiting_on = NULL,
    waiting_for = NULL, finished_at = CASE WHEN :status IN ('succeeded', 'failed', 'cancelled') THEN :now END,
    updated_at = :now, progress_at = :now
WHERE id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'running'
  AND (slot_scope IS NOT NULL) = :slotted AND parent_id IS NULL AND (on_failure IS NULL OR :status <> 'failed')
  AND NOT EXISTS (SELECT 1 FROM lockgate_runs c WHERE c.parent_id = lockgate_runs.id
                  AND c.status IN ('running', 'suspended'));

-- name: set_status
UPDATE lockgate_runs
SET status = :status, error_tag = COALESCE(:error_tag, error_tag), error_message = COALESCE(:error_message, error_message),
    owner = NULL, lease_until = NULL, entered_at = NULL, wake_at = :wake_at, waiting_on = NULL, waiting_for = NULL,
    finished_at = CASE WHEN :status IN ('succeeded', 'failed', 'cancelled') THEN :now END,
    updated_at = :now, progress_at = :now, epoch = epoch + 1,
    reclaim_count = CASE WHEN :status = 'running' THEN 0 ELSE reclaim_count END,
    stalled_at = NULL
WHERE id = :run_id AND status = :from_status
RETURNING id, workflow, parent_id, payload, slot_scope, on_failure,
    EXISTS (SELECT 1 FROM lockgate_runs c WHERE c.parent_id = lockgate_runs.id
            AND c.status IN ('running', 'suspended')) AS open_children;

-- name: set_waiting_for
-- A resumed run that had given its concurrency slot back is marked so (engine/children.py: take_back).
UPDATE lockgate_runs SET waiting_for = :waiting_for WHERE id = :run_id;

-- name: clear_failure
-- A re-opened run gets its whole timeouts.finish budget again, counted from now.
UPDATE lockgate_runs
SET error_tag = NULL, error_message = NULL, output = NULL,
    deadline_at = CASE WHEN deadline_at IS NOT NULL THEN :now + (deadline_at - created_at) END
WHERE id = :run_id;

-- name: set_discarded
UPDATE lockgate_runs SET discarded_at = :now, updated_at = :now
WHERE id = :run_id AND status = 'failed' AND discarded_at IS NULL
RETURNING id;

-- name: wake_run
UPDATE lockgate_runs SET wake_at = :now, updated_at = :now
WHERE id = :run_id AND status = 'running' AND owner IS NULL AND waiting_on = :waiting_on
  AND (wake_at IS NULL OR wake_at > :now);

-- name: wake_for_cancel
-- A compensating cancel marks the run's row, and a run nobody holds (parked, or due) is due now, so that a
-- worker enters it. A holder's park waits for this row and then reads the mark (park_run).
UPDATE lockgate_runs SET cancel_requested = 1, updated_at = :now,
    wake_at = CASE WHEN owner IS NULL THEN :now ELSE wake_at END
WHERE id = :run_id AND status = 'running';

-- name: open_children
SELECT id, parent_close FROM lockgate_runs
WHERE parent_id = :parent_id AND status IN ('running', 'suspended');

-- name: stale_candidates
SELECT id, workflow, status, waiting_on, progress_at, wake_at FROM lockgate_runs
WHERE status IN ('running', 'suspended') AND progress_at < :before
  AND (stalled_at IS NULL OR stalled_at <= progress_at)
  AND NOT (status = 'running' AND wake_at IS NOT NULL AND wake_at > :now AND owner IS NULL)
ORDER BY progress_at LIMIT :limit;

-- name: mark_stalled
UPDATE lockgate_runs SET stalled_at = :now WHERE id = :run_id;

-- name: runs_before
-- Runs matching the given filters (NULL: any) that come after the run :before_id (created at
-- :before_at) in newest-first order: a page that continues from a cursor, not an offset.
SELECT * FROM lockgate_runs
WHERE (:workflow IS NULL OR workflow = :workflow)
  AND (:status IS NULL OR status = :status)
  AND (:parent_id IS NULL OR parent_id = :parent_id)
  AND (:source IS NULL OR source = :source)
  AND (created_at < :before_at OR (created_at = :before_at AND id < :before_id))
ORDER BY created_at DESC, id DESC
LIMIT :limit OFFSET :offset;

-- name: adopt_child
-- A gated child admitted after it was parked was created without its parent: the parent claims it by
-- its ticket (the arrival it offered), so that its end wakes the parent and the parent's end closes it.
UPDATE lockgate_runs SET parent_id = :parent_id, parent_close = :parent_close, updated_at = :now
WHERE id = :run_id AND ticket = :ticket AND parent_id IS NULL;

