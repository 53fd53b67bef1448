-- name: insert_run
-- owner .. entries: a run a blocking start's own engine claims as it creates it (else NULL, 0).
INSERT INTO lockgate_runs (id, workflow, identity, idempotency_key, status, payload, version, patches,
    parent_id, parent_close, retry_of, source, trace_id, subject, ticket, recording, created_at, updated_at, progress_at, wake_at,
    singleton_key, deadline_at, on_failure, slot_scope, slot_key, owner, lease_until, epoch, entered_at, entries,
    flow_control)
VALUES (%(id)s, %(workflow)s, %(identity)s, %(idempotency_key)s, 'running', %(payload)s, %(version)s, %(patches)s,
    %(parent_id)s, %(parent_close)s, %(retry_of)s, %(source)s, %(trace_id)s, %(subject)s, %(ticket)s, %(recording)s, %(now)s, %(now)s, %(now)s, %(wake_at)s,
    %(singleton_key)s, %(deadline_at)s, %(on_failure)s, %(slot_scope)s, %(slot_key)s,
    %(owner)s, %(lease_until)s, %(epoch)s, %(entered_at)s, %(entries)s, %(flow_control)s)
ON CONFLICT (identity) DO NOTHING
RETURNING id;

-- name: get_run
SELECT * FROM lockgate_runs WHERE id = %(id)s;

-- name: lock_run
-- A run a signal, an update or a token's completion is sent to, its row locked until the send commits:
-- a park of the run meanwhile waits for the send, then finds the message (park_run's pending_for_waits
-- reads after its update); or the send waits for the park, then wakes the parked run (wake_run).
-- Without it, a send whose wake-up came before the park and whose commit came after the park's look
-- for messages woke nothing.
SELECT * FROM lockgate_runs WHERE id = %(id)s FOR NO KEY UPDATE;

-- name: get_runs
SELECT * FROM lockgate_runs WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: get_run_by_identity
SELECT * FROM lockgate_runs WHERE identity = %(identity)s;

-- name: ended_rows
-- The final rows of those awaited runs that ended: a waiter woken by them needs no read of its own.
SELECT * FROM lockgate_runs
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb))) AND status IN ('succeeded', 'failed', 'cancelled');

-- name: list_runs
SELECT * FROM lockgate_runs
WHERE (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(parent_id)s::text IS NULL OR parent_id = %(parent_id)s::text)
  AND (%(source)s::text IS NULL OR source = %(source)s::text)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: count_runs_by_status
-- The counts kept (migration 0040) and the changes the counts sweep has not folded in yet: a row per
-- workflow and status and the last seconds' changes, however many runs the store holds.
SELECT workflow, status, SUM(n) AS n FROM (
    SELECT workflow, status, n FROM lockgate_run_counts
    UNION ALL SELECT workflow, status, n FROM lockgate_run_count_changes
) c GROUP BY workflow, status HAVING SUM(n) <> 0;

-- name: last_successes
-- The newest finished_at of each workflow's succeeded runs, while any is kept: read at a /metrics scrape
-- from the counts (migration 0040), never on a run's path. Retention forgets the oldest runs first, so the
-- newest success is the last of them to go.
SELECT workflow, MAX(last_finished) AS at FROM (
    SELECT workflow, n, last_finished FROM lockgate_run_counts WHERE status = 'succeeded'
    UNION ALL SELECT workflow, n, last_finished FROM lockgate_run_count_changes WHERE status = 'succeeded'
) c GROUP BY workflow HAVING SUM(n) > 0;

-- name: fold_run_counts
-- The counts sweep: the changes appended since the last fold move into the counts (a fold under way elsewhere
-- holds the rows it moves; this one skips them once they are gone).
WITH moved AS (DELETE FROM lockgate_run_count_changes RETURNING workflow, status, n, last_finished)
INSERT INTO lockgate_run_counts AS c (workflow, status, n, last_finished)
SELECT workflow, status, SUM(n), MAX(last_finished) FROM moved GROUP BY workflow, status
ON CONFLICT (workflow, status) DO UPDATE
SET n = c.n + EXCLUDED.n, last_finished = greatest(c.last_finished, EXCLUDED.last_finished)
RETURNING workflow;

-- name: claim_runs
-- Only runs this worker takes: each key is a workflow it takes and a version its code runs ('' for
-- none), and a run's recorded patches must all be known to that code (routing.py: claim_filter).
-- SKIP LOCKED: replicas claiming at once take disjoint runs instead of queueing on each other's rows.
UPDATE lockgate_runs
SET owner = %(owner)s, epoch = epoch + 1, lease_until = %(lease_until)s,
    reclaim_count = CASE WHEN entered_at IS NOT NULL THEN reclaim_count + 1 ELSE 0 END,
    entered_at = %(now)s, entries = entries + 1, updated_at = %(now)s
WHERE id IN (
    SELECT id FROM lockgate_runs
    WHERE status = 'running' AND wake_at <= %(now)s
      AND (owner IS NULL OR (lease_until < %(now)s AND owner <> %(owner)s))
      AND workflow || chr(31) || COALESCE(version, '') IN (SELECT jsonb_array_elements_text(%(keys)s::jsonb))
      AND (patches = '[]' OR patches::jsonb <@ (%(patches)s::jsonb -> workflow))
    ORDER BY wake_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING *;

-- name: next_wake
SELECT MIN(CASE WHEN owner IS NULL THEN wake_at WHEN owner = %(owner)s THEN NULL
    ELSE GREATEST(wake_at, lease_until) END) AS at
FROM lockgate_runs WHERE status = 'running' AND wake_at IS NOT NULL;

-- name: release_run
UPDATE lockgate_runs SET owner = NULL, lease_until = NULL, wake_at = %(wake_at)s
WHERE id = %(run_id)s AND owner = %(owner)s AND epoch = %(epoch)s AND status = 'running';

-- name: park_run
UPDATE lockgate_runs
SET owner = NULL, lease_until = NULL, entered_at = NULL, waiting_on = %(waiting_on)s,
    waiting_for = %(waiting_for)s, updated_at = %(now)s,
    -- a compensating cancel that came while the run was held: due at once, to be entered and cancelled (the
    -- row's mark: the cancel may have held the row while this statement waited, its journal entry unseen)
    wake_at = CASE WHEN cancel_requested = 1
        OR EXISTS (SELECT 1 FROM lockgate_journal j WHERE j.run_id = %(run_id)s AND j.step_key = '$cancel')
        THEN CAST(%(now)s AS DOUBLE PRECISION) ELSE CAST(%(wake_at)s AS DOUBLE PRECISION) END
WHERE id = %(run_id)s AND owner = %(owner)s AND epoch = %(epoch)s AND status = 'running'
RETURNING id, wake_at;

-- name: lock_parent
-- A child's end takes its parent's row first (parent before child, the order a parent's own end takes
-- them in), so that it and the parent's park never miss each other: one waits for the other's commit
-- and then sees it (finish_collecting, park_run).
SELECT p.id FROM lockgate_runs p
WHERE p.id = (SELECT c.parent_id FROM lockgate_runs c WHERE c.id = %(run_id)s)
FOR UPDATE;

-- name: pending_for_waits
SELECT 1 AS hit FROM lockgate_messages
WHERE run_id = %(run_id)s AND status = 'pending'
  AND name IN (SELECT jsonb_array_elements_text(%(names)s::jsonb))
UNION ALL
SELECT 1 AS hit FROM lockgate_runs
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(children)s::jsonb))) AND status IN ('succeeded', 'failed', 'cancelled')
LIMIT 1;

-- name: finish_run
UPDATE lockgate_runs
SET status = %(status)s, output = %(output)s, error_tag = %(error_tag)s, error_message = %(error_message)s,
    owner = NULL, lease_until = NULL, entered_at = NULL, wake_at = NULL, waiting_on = NULL,
    waiting_for = NULL,
    finished_at = CASE WHEN %(status)s::text IN ('succeeded', 'failed', 'cancelled') THEN %(now)s::float8 END,
    updated_at = %(now)s, progress_at = %(now)s
WHERE id = %(run_id)s AND owner = %(owner)s AND epoch = %(epoch)s AND status = 'running'
RETURNING id, workflow, parent_id, payload, slot_scope, on_failure,
    EXISTS (SELECT 1 FROM lockgate_runs c WHERE c.parent_id = lockgate_runs.id
            AND c.status IN ('running', 'suspended')) AS open_children;

-- name: finish_run_plain
-- finish_run for a run whose end asks nothing more (no parent to wake, no open child to close, no failure
-- report); such a run is most runs. With %(slotted)s, a run holding a concurrency slot, freed by the statement
-- after it (gate/handoff.py passes it on); else a run without one. No row changed: finish_run it is.
UPDATE lockgate_runs
SET status = %(status)s, output = %(output)s, error_tag = %(error_tag)s, error_message = %(error_message)s,
    owner = NULL, lease_until = NULL, entered_at = NULL, wake_at = NULL, waiting_on = NULL,
    waiting_for = NULL,
    finished_at = CASE WHEN %(status)s::text IN ('succeeded', 'failed', 'cancelled') THEN %(now)s::float8 END,
    updated_at = %(now)s, progress_at = %(now)s
WHERE id = %(run_id)s AND owner = %(owner)s AND epoch = %(epoch)s AND status = 'running'
  AND (slot_scope IS NOT NULL) = %(slotted)s::boolean AND parent_id IS NULL
  AND (on_failure IS NULL OR %(status)s::text <> 'failed')
  AND NOT EXISTS (SELECT 1 FROM lockgate_runs c WHERE c.parent_id = lockgate_runs.id
                  AND c.status IN ('running', 'suspended'));

-- name: set_status
UPDATE lockgate_runs
SET status = %(status)s, error_tag = COALESCE(%(error_tag)s, error_tag),
    error_message = COALESCE(%(error_message)s, error_message),
    owner = NULL, lease_until = NULL, entered_at = NULL, wake_at = %(wake_at)s, waiting_on = NULL, waiting_for = NULL,
    finished_at = CASE WHEN %(status)s::text IN ('succeeded', 'failed', 'cancelled') THEN %(now)s::float8 END,
    updated_at = %(now)s, progress_at = %(now)s, epoch = epoch + 1,
    reclaim_count = CASE WHEN %(status)s::text = 'running' THEN 0 ELSE reclaim_count END,
    stalled_at = NULL
WHERE id = %(run_id)s AND status = %(from_status)s
RETURNING id, workflow, parent_id, payload, slot_scope, on_failure,
    EXISTS (SELECT 1 FROM lockgate_runs c WHERE c.parent_id = lockgate_runs.id
            AND c.status IN ('running', 'suspended')) AS open_children;

-- name: set_waiting_for
-- A resumed run that had given its concurrency slot back is marked so (engine/children.py: take_back).
UPDATE lockgate_runs SET waiting_for = %(waiting_for)s WHERE id = %(run_id)s;

-- name: clear_failure
-- A re-opened run gets its whole timeouts.finish budget again, counted from now.
UPDATE lockgate_runs
SET error_tag = NULL, error_message = NULL, output = NULL,
    deadline_at = CASE WHEN deadline_at IS NOT NULL THEN %(now)s + (deadline_at - created_at) END
WHERE id = %(run_id)s;

-- name: set_discarded
UPDATE lockgate_runs SET discarded_at = %(now)s, updated_at = %(now)s
WHERE id = %(run_id)s AND status = 'failed' AND discarded_at IS NULL
RETURNING id;

-- name: wake_run
UPDATE lockgate_runs SET wake_at = %(now)s, updated_at = %(now)s
WHERE id = %(run_id)s AND status = 'running' AND owner IS NULL AND waiting_on = %(waiting_on)s
  AND (wake_at IS NULL OR wake_at > %(now)s);

-- name: wake_for_cancel
-- A compensating cancel marks the run's row, and a run nobody holds (parked, or due) is due now, so that a
-- worker enters it. A holder's park waits for this row and then reads the mark (park_run).
UPDATE lockgate_runs SET cancel_requested = 1, updated_at = %(now)s,
    wake_at = CASE WHEN owner IS NULL THEN %(now)s ELSE wake_at END
WHERE id = %(run_id)s AND status = 'running';

-- name: open_children
SELECT id, parent_close FROM lockgate_runs
WHERE parent_id = %(parent_id)s AND status IN ('running', 'suspended');

-- name: stale_candidates
SELECT id, workflow, status, waiting_on, progress_at, wake_at FROM lockgate_runs
WHERE status IN ('running', 'suspended') AND progress_at < %(before)s
  AND (stalled_at IS NULL OR stalled_at <= progress_at)
  AND NOT (status = 'running' AND wake_at IS NOT NULL AND wake_at > %(now)s AND owner IS NULL)
ORDER BY progress_at LIMIT %(limit)s;

-- name: mark_stalled
UPDATE lockgate_runs SET stalled_at = %(now)s WHERE id = %(run_id)s;

-- name: runs_before
-- Runs matching the given filters (NULL: any) that come after the run %(before_id)s (created at
-- %(before_at)s) in newest-first order: a page that continues from a cursor, not an offset.
SELECT * FROM lockgate_runs
WHERE (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(parent_id)s::text IS NULL OR parent_id = %(parent_id)s::text)
  AND (%(source)s::text IS NULL OR source = %(source)s::text)
  AND (created_at < %(before_at)s OR (created_at = %(before_at)s AND id < %(before_id)s))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: adopt_child
-- A gated child admitted after it was parked was created without its parent: the parent claims it by
-- its ticket (the arrival it offered), so that its end wakes the parent and the parent's end closes it.
UPDATE lockgate_runs SET parent_id = %(parent_id)s, parent_close = %(parent_close)s, updated_at = %(now)s
WHERE id = %(run_id)s AND ticket = %(ticket)s AND parent_id IS NULL;

