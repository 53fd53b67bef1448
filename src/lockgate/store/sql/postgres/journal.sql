-- name: load_journal
SELECT * FROM lockgate_journal WHERE run_id = %(run_id)s ORDER BY seq;

-- name: upsert_journal
-- repeatable: the entry is keyed by (run, step) and takes the given values whether or not it exists.
-- Written only while the run is held (owner and epoch), which is checked in the same statement: no row
-- written means the lease moved on. FOR SHARE keeps a claim from taking the run over before this commits.
WITH held AS (
    SELECT id FROM lockgate_runs
    WHERE id = %(run_id)s AND owner = %(owner)s AND epoch = %(epoch)s AND status = 'running'
    FOR SHARE
)
INSERT INTO lockgate_journal (run_id, step_key, seq, kind, status, output, error_tag, error_message,
    attempts, due_at, started_at, finished_at, flow_wait)
SELECT held.id, %(step_key)s::text, %(seq)s::integer, %(kind)s::text, %(status)s::text, %(output)s::text,
    %(error_tag)s::text, %(error_message)s::text, %(attempts)s::integer, %(due_at)s::float8,
    %(started_at)s::float8, %(finished_at)s::float8, %(flow_wait)s::float8
FROM held
ON CONFLICT (run_id, step_key) DO UPDATE SET
    seq = excluded.seq, kind = excluded.kind, status = excluded.status, output = excluded.output,
    error_tag = excluded.error_tag, error_message = excluded.error_message, attempts = excluded.attempts,
    due_at = excluded.due_at, started_at = excluded.started_at, finished_at = excluded.finished_at,
    flow_wait = excluded.flow_wait;

-- name: upsert_journal_many
-- upsert_journal for the entries of many held runs (a JSON array of objects: each entry's columns with its
-- run's owner and epoch), in one statement: the runs still held are locked and read once, and only their
-- entries are written. Fewer rows written than entries given means a lease moved on.
WITH e AS (
    SELECT * FROM jsonb_to_recordset(%(entries)s::jsonb) AS e(
        run_id text, owner text, epoch bigint, step_key text, seq integer, kind text, status text, output text,
        error_tag text, error_message text, attempts integer, due_at float8, started_at float8, finished_at float8,
        flow_wait float8)
), held AS (  -- each run looked up by its id (a plan that walked the running runs would grow with them)
    SELECT r.id FROM (SELECT DISTINCT run_id, owner, epoch FROM e) AS f, LATERAL (
        SELECT id FROM lockgate_runs
        WHERE id = f.run_id AND owner = f.owner AND epoch = f.epoch AND status = 'running'
        FOR SHARE
    ) AS r
)
INSERT INTO lockgate_journal (run_id, step_key, seq, kind, status, output, error_tag, error_message,
    attempts, due_at, started_at, finished_at, flow_wait)
SELECT e.run_id, e.step_key, e.seq, e.kind, e.status, e.output, e.error_tag, e.error_message, e.attempts,
    e.due_at, e.started_at, e.finished_at, e.flow_wait
FROM e WHERE e.run_id IN (SELECT id FROM held)
ON CONFLICT (run_id, step_key) DO UPDATE SET
    seq = excluded.seq, kind = excluded.kind, status = excluded.status, output = excluded.output,
    error_tag = excluded.error_tag, error_message = excluded.error_message, attempts = excluded.attempts,
    due_at = excluded.due_at, started_at = excluded.started_at, finished_at = excluded.finished_at,
    flow_wait = excluded.flow_wait;

-- name: delete_failed_journal
-- Pending entries (a timer, a signal's timeout) keep their due times across a resume.
DELETE FROM lockgate_journal WHERE run_id = %(run_id)s AND status = 'failed';

-- name: delete_failed_compensations
-- Resuming a run suspended by a failed compensation: the compensation runs again, the failure it undid stays.
DELETE FROM lockgate_journal WHERE run_id = %(run_id)s AND status = 'failed' AND kind = 'compensation';

-- name: has_compensations
-- Whether the body ran any compensation (an undo began): a resume then keeps the failure it undid after.
SELECT 1 AS hit FROM lockgate_journal WHERE run_id = %(run_id)s AND kind = 'compensation' LIMIT 1;

-- name: insert_cancel_request
-- A cancel with compensate=True, kept as the run's journal entry '$cancel' (seq -1: read first, before every
-- other entry): an entry of the body then reads it as it replays. Once: a second request changes nothing.
INSERT INTO lockgate_journal (run_id, step_key, seq, kind, status, error_message, attempts, started_at, finished_at)
VALUES (%(run_id)s, '$cancel', -1, 'cancel', 'completed', %(reason)s, 0, %(now)s, %(now)s)
ON CONFLICT (run_id, step_key) DO NOTHING
RETURNING step_key;

-- name: delete_journal_from
DELETE FROM lockgate_journal WHERE run_id = %(run_id)s AND seq >= %(seq)s;

-- name: insert_attempt
INSERT INTO lockgate_step_attempts (run_id, step_key, attempt, status, input, error_tag, error_message,
    started_at, finished_at)
VALUES (%(run_id)s, %(step_key)s, %(attempt)s, %(status)s, %(input)s, %(error_tag)s, %(error_message)s,
    %(started_at)s, %(finished_at)s);

-- name: list_attempts
-- A first attempt that completed its step (with no input to record) has no row of its own: the
-- step's journal entry is its record, so a step never waits on that introspection write.
SELECT * FROM (
    SELECT id, run_id, step_key, attempt, status, input, error_tag, error_message, started_at, finished_at
    FROM lockgate_step_attempts WHERE run_id = %(run_id)s
    UNION ALL
    SELECT NULL, j.run_id, j.step_key, 1, 'completed', NULL, NULL, NULL, j.started_at, j.finished_at
    FROM lockgate_journal j JOIN lockgate_runs r ON r.id = j.run_id AND r.recording = 'full'
    WHERE j.run_id = %(run_id)s AND j.kind = 'step' AND j.status = 'completed' AND j.attempts = 1
      AND NOT EXISTS (
          SELECT 1 FROM lockgate_step_attempts a
          WHERE a.run_id = j.run_id AND a.step_key = j.step_key AND a.attempt = 1 AND a.status = 'completed'
            AND a.input IS NOT NULL AND a.started_at = j.started_at)
) AS attempts
ORDER BY started_at, attempt, step_key;

-- name: keep_attempts_from
-- Journal entries from seq on are about to be deleted: their journal-derived attempts become rows.
INSERT INTO lockgate_step_attempts (run_id, step_key, attempt, status, input, error_tag, error_message,
    started_at, finished_at)
SELECT j.run_id, j.step_key, 1, 'completed', NULL, NULL, NULL, j.started_at, j.finished_at
FROM lockgate_journal j JOIN lockgate_runs r ON r.id = j.run_id AND r.recording = 'full'
WHERE j.seq >= %(seq)s AND j.run_id = %(run_id)s AND j.kind = 'step' AND j.status = 'completed' AND j.attempts = 1
      AND NOT EXISTS (
          SELECT 1 FROM lockgate_step_attempts a
          WHERE a.run_id = j.run_id AND a.step_key = j.step_key AND a.attempt = 1 AND a.status = 'completed'
            AND a.input IS NOT NULL AND a.started_at = j.started_at);

-- name: insert_event
INSERT INTO lockgate_run_events (run_id, type, at, data) VALUES (%(run_id)s, %(type)s, %(at)s, %(data)s);

-- name: list_events
SELECT * FROM lockgate_run_events WHERE run_id = %(run_id)s ORDER BY id;

-- name: list_events_of_type
SELECT * FROM lockgate_run_events WHERE type = %(type)s ORDER BY id DESC LIMIT %(limit)s;

-- name: fence_touch
UPDATE lockgate_runs SET progress_at = %(now)s, updated_at = %(now)s
WHERE id = %(run_id)s AND owner = %(owner)s AND epoch = %(epoch)s AND status = 'running'
RETURNING id;
