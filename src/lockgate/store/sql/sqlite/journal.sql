-- name: load_journal
SELECT * FROM lockgate_journal WHERE run_id = :run_id ORDER BY seq;

-- name: upsert_journal
-- Written only while the run is held (owner and epoch), which is checked in the same statement: no row
-- written means the lease moved on.
INSERT INTO lockgate_journal (run_id, step_key, seq, kind, status, output, error_tag, error_message,
    attempts, due_at, started_at, finished_at, flow_wait)
SELECT id, :step_key, :seq, :kind, :status, :output, :error_tag, :error_message,
    :attempts, :due_at, :started_at, :finished_at, :flow_wait
FROM lockgate_runs
WHERE id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'running'
ON CONFLICT (run_id, step_key) DO UPDATE SET
    seq = excluded.seq, kind = excluded.kind, status = excluded.status, output = excluded.output,
    error_tag = excluded.error_tag, error_message = excluded.error_message, attempts = excluded.attempts,
    due_at = excluded.due_at, started_at = excluded.started_at, finished_at = excluded.finished_at,
    flow_wait = excluded.flow_wait;

-- name: upsert_journal_many
-- upsert_journal for the entries of many held runs (a JSON array of objects: each entry's columns with its
-- run's owner and epoch; times as text, which CAST reads exactly where SQLite's JSON numbers keep 15 digits),
-- in one statement. Fewer rows written than entries given means a lease moved on. Here a statement is a
-- function call, and one per entry costs less than reading the JSON (Tx.rows_in_one): ops.record_held
-- writes per entry, and this form stays beside PostgreSQL's, tested.
INSERT INTO lockgate_journal (run_id, step_key, seq, kind, status, output, error_tag, error_message,
    attempts, due_at, started_at, finished_at, flow_wait)
SELECT e.value ->> 'run_id', e.value ->> 'step_key', e.value ->> 'seq', e.value ->> 'kind', e.value ->> 'status',
    e.value ->> 'output', e.value ->> 'error_tag', e.value ->> 'error_message', e.value ->> 'attempts',
    CAST(e.value ->> 'due_at' AS REAL), CAST(e.value ->> 'started_at' AS REAL), CAST(e.value ->> 'finished_at' AS REAL),
    CAST(e.value ->> 'flow_wait' AS REAL)
FROM json_each(:entries) AS e
WHERE EXISTS (
    SELECT 1 FROM lockgate_runs
    WHERE id = e.value ->> 'run_id' AND owner = e.value ->> 'owner' AND epoch = e.value ->> 'epoch'
      AND status = 'running')
ON CONFLICT (run_id, step_key) DO UPDATE SET
    seq = excluded.seq, kind = excluded.kind, status = excluded.status, output = excluded.output,
    error_tag = excluded.error_tag, error_message = excluded.error_message, attempts = excluded.attempts,
    due_at = excluded.due_at, started_at = excluded.started_at, finished_at = excluded.finished_at,
    flow_wait = excluded.flow_wait;

-- name: delete_failed_journal
-- Pending entries (a timer, a signal's timeout) keep their due times across a resume.
DELETE FROM lockgate_journal WHERE run_id = :run_id AND status = 'failed';

-- name: delete_failed_compensations
-- Resuming a run suspended by a failed compensation: the compensation runs again, the failure it undid stays.
DELETE FROM lockgate_journal WHERE run_id = :run_id AND status = 'failed' AND kind = 'compensation';

-- name: has_compensations
-- Whether the body ran any compensation (an undo began): a resume then keeps the failure it undid after.
SELECT 1 AS hit FROM lockgate_journal WHERE run_id = :run_id AND kind = 'compensation' LIMIT 1;

-- name: insert_cancel_request
-- A cancel with compensate=True, kept as the run's journal entry '$cancel' (seq -1: read first, before every
-- other entry): an entry of the body then reads it as it replays. Once: a second request changes nothing.
INSERT INTO lockgate_journal (run_id, step_key, seq, kind, status, error_message, attempts, started_at, finished_at)
VALUES (:run_id, '$cancel', -1, 'cancel', 'completed', :reason, 0, :now, :now)
ON CONFLICT (run_id, step_key) DO NOTHING
RETURNING step_key;

-- name: delete_journal_from
DELETE FROM lockgate_journal WHERE run_id = :run_id AND seq >= :seq;

-- name: insert_attempt
INSERT INTO lockgate_step_attempts (run_id, step_key, attempt, status, input, error_tag, error_message,
    started_at, finished_at)
VALUES (:run_id, :step_key, :attempt, :status, :input, :error_tag, :error_message, :started_at, :finished_at);

-- name: list_attempts
-- A first attempt that completed its step (with no input to record) has no row of its own: the
-- step's journal entry is its record, so a step never waits on that introspection write.
SELECT * FROM (
    SELECT id, run_id, step_key, attempt, status, input, error_tag, error_message, started_at, finished_at
    FROM lockgate_step_attempts WHERE run_id = :run_id
    UNION ALL
    SELECT NULL, j.run_id, j.step_key, 1, 'completed', NULL, NULL, NULL, j.started_at, j.finished_at
    FROM lockgate_journal j JOIN lockgate_runs r ON r.id = j.run_id AND r.recording = 'full'
    WHERE j.run_id = :run_id AND j.kind = 'step' AND j.status = 'completed' AND j.attempts = 1
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
WHERE j.seq >= :seq AND j.run_id = :run_id AND j.kind = 'step' AND j.status = 'completed' AND j.attempts = 1
      AND NOT EXISTS (
          SELECT 1 FROM lockgate_step_attempts a
          WHERE a.run_id = j.run_id AND a.step_key = j.step_key AND a.attempt = 1 AND a.status = 'completed'
            AND a.input IS NOT NULL AND a.started_at = j.started_at);

-- name: insert_event
INSERT INTO lockgate_run_events (run_id, type, at, data) VALUES (:run_id, :type, :at, :data);

-- name: list_events
SELECT * FROM lockgate_run_events WHERE run_id = :run_id ORDER BY id;

-- name: list_events_of_type
SELECT * FROM lockgate_run_events WHERE type = :type ORDER BY id DESC LIMIT :limit;

-- name: fence_touch
UPDATE lockgate_runs SET progress_at = :now, updated_at = :now
WHERE id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'running'
RETURNING id;
