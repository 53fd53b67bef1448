-- name: load_journal
SELECT * FROM lockgate_journal WHERE run_id = %(run_id)s ORDER BY seq;

-- name: upsert_journal
INSERT INTO lockgate_journal (run_id, step_key, seq, kind, status, output, error_tag, error_message,
    attempts, due_at, started_at, finished_at)
VALUES (%(run_id)s, %(step_key)s, %(seq)s, %(kind)s, %(status)s, %(output)s, %(error_tag)s, %(error_message)s,
    %(attempts)s, %(due_at)s, %(started_at)s, %(finished_at)s)
ON CONFLICT (run_id, step_key) DO UPDATE SET
    seq = excluded.seq, kind = excluded.kind, status = excluded.status, output = excluded.output,
    error_tag = excluded.error_tag, error_message = excluded.error_message, attempts = excluded.attempts,
    due_at = excluded.due_at, started_at = excluded.started_at, finished_at = excluded.finished_at;

-- name: delete_failed_journal
-- Pending entries (a timer, a signal's timeout) keep their due times across a resume.
DELETE FROM lockgate_journal WHERE run_id = %(run_id)s AND status = 'failed';

-- name: delete_journal_from
DELETE FROM lockgate_journal WHERE run_id = %(run_id)s AND seq >= %(seq)s;

-- name: insert_attempt
INSERT INTO lockgate_step_attempts (run_id, step_key, attempt, status, input, error_tag, error_message,
    started_at, finished_at)
VALUES (%(run_id)s, %(step_key)s, %(attempt)s, %(status)s, %(input)s, %(error_tag)s, %(error_message)s,
    %(started_at)s, %(finished_at)s);

-- name: list_attempts
SELECT * FROM lockgate_step_attempts WHERE run_id = %(run_id)s ORDER BY id;

-- name: insert_event
INSERT INTO lockgate_run_events (run_id, type, at, data) VALUES (%(run_id)s, %(type)s, %(at)s, %(data)s);

-- name: list_events
SELECT * FROM lockgate_run_events WHERE run_id = %(run_id)s ORDER BY id;

-- name: list_events_of_type
SELECT * FROM lockgate_run_events WHERE type = %(type)s ORDER BY id DESC LIMIT %(limit)s;
