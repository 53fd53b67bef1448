-- name: insert_message
INSERT INTO lockgate_messages (id, run_id, kind, name, payload, status, created_at)
VALUES (:id, :run_id, :kind, :name, :payload, 'pending', :now);

-- name: next_message
SELECT * FROM lockgate_messages
WHERE run_id = :run_id AND kind = :kind AND name = :name AND status = 'pending'
ORDER BY created_at, id LIMIT 1;

-- name: get_message
SELECT * FROM lockgate_messages WHERE id = :id;

-- name: settle_message
UPDATE lockgate_messages
SET status = :status, step_key = COALESCE(:step_key, step_key), result = :result,
    error_tag = :error_tag, error_message = :error_message, finished_at = :now
WHERE id = :id AND status IN ('pending', 'consumed')
RETURNING id;

-- name: list_messages
SELECT * FROM lockgate_messages WHERE run_id = :run_id ORDER BY created_at, id;

-- name: reoffer_consumed_signals
-- Signals consumed by journal entries about to be re-run go back to the queue, in their first order.
UPDATE lockgate_messages SET status = 'pending', step_key = NULL, finished_at = NULL
WHERE run_id = :run_id AND kind = 'signal' AND status = 'consumed'
  AND step_key IN (SELECT step_key FROM lockgate_journal WHERE run_id = :run_id AND seq >= :seq);
