-- name: load_journal
SELECT * FROM lockgate_journal WHERE run_id = :run_id ORDER BY seq;

-- name: upsert_journal
INSERT INTO lockgate_journal (run_id, step_key, seq, kind, status, output, error_tag, error_message,
    attempts, due_at, started_at, finished_at)
VALUES (:run_id, :step_key, :seq, :kind, :status, :output, :error_tag, :error_message,
    :attempts, :due_at, :started_at, :finished_at)
ON CONFLICT (run_id, step_key) DO UPDATE SET
    seq = excluded.seq, kind = excluded.kind, status = excluded.status, output = excluded.output,
    error_tag = excluded.error_tag, error_message = excluded.error_message, attempts = excluded.attempts,
    due_at = excluded.due_at, started_at = excluded.started_at, finished_at = excluded.finished_at;

-- name: delete_failed_journal
-- Pending entries (a timer, a signal's timeout) keep their due times across a resume.
DELETE FROM lockgate_journal WHERE run_id = :run_id AND status = 'failed';

-- name: delete_journal_from
DELETE FROM lockgate_journal WHERE run_id = :run_id AND seq >= :seq;

-- name: insert_attempt
INSERT INTO lockgate_step_attempts (run_id, step_key, attempt, status, input, error_tag, error_message,
    started_at, finished_at)
VALUES (:run_id, :step_key, :attempt, :status, :input, :error_tag, :error_message, :started_at, :finished_at);

-- name: list_attempts
SELECT * FROM lockgate_step_attempts WHERE run_id = :run_id ORDER BY id;

-- name: insert_event
INSERT INTO lockgate_run_events (run_id, type, at, data) VALUES (:run_id, :type, :at, :data);

-- name: list_events
SELECT * FROM lockgate_run_events WHERE run_id = :run_id ORDER BY id;

-- name: list_events_of_type
SELECT * FROM lockgate_run_events WHERE type = :type ORDER BY id DESC LIMIT :limit;
