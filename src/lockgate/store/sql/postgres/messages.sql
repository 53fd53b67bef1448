-- name: insert_message
INSERT INTO lockgate_messages (id, run_id, kind, name, payload, status, created_at)
VALUES (%(id)s, %(run_id)s, %(kind)s, %(name)s, %(payload)s, 'pending', %(now)s);

-- name: next_message
SELECT * FROM lockgate_messages
WHERE run_id = %(run_id)s AND kind = %(kind)s AND name = %(name)s AND status = 'pending'
ORDER BY created_at, id LIMIT 1;

-- name: get_message
SELECT * FROM lockgate_messages WHERE id = %(id)s;

-- name: settle_message
UPDATE lockgate_messages
SET status = %(status)s, step_key = COALESCE(%(step_key)s, step_key), result = %(result)s,
    error_tag = %(error_tag)s, error_message = %(error_message)s, finished_at = %(now)s
WHERE id = %(id)s AND status IN ('pending', 'consumed')
RETURNING id;

-- name: list_messages
SELECT * FROM lockgate_messages WHERE run_id = %(run_id)s ORDER BY created_at, id;

-- name: reoffer_consumed_signals
-- Signals consumed by journal entries about to be re-run go back to the queue, in their first order.
UPDATE lockgate_messages SET status = 'pending', step_key = NULL, finished_at = NULL
WHERE run_id = %(run_id)s AND kind = 'signal' AND status = 'consumed'
  AND step_key IN (SELECT step_key FROM lockgate_journal WHERE run_id = %(run_id)s AND seq >= %(seq)s);
