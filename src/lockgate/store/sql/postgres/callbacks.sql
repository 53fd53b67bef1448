-- Approval tokens (store/callbacks.py). Kept in lockstep with sql/sqlite/callbacks.sql.

-- name: insert_callback_token
INSERT INTO lockgate_callback_tokens
    (id, hash, run_id, step_key, name, model, single_use, status, uses, created_at, expires_at)
VALUES (%(id)s, %(hash)s, %(run_id)s, %(step_key)s, %(name)s, %(model)s, %(single_use)s, 'pending', 0, %(now)s, %(expires_at)s)
ON CONFLICT (run_id, step_key) DO UPDATE SET
    id = EXCLUDED.id, hash = EXCLUDED.hash, name = EXCLUDED.name, model = EXCLUDED.model,
    single_use = EXCLUDED.single_use, status = 'pending', uses = 0, created_at = EXCLUDED.created_at,
    expires_at = EXCLUDED.expires_at, completed_at = NULL;

-- name: callback_token_by_hash
SELECT t.*, r.workflow, r.status AS run_status, r.payload AS run_payload
FROM lockgate_callback_tokens t JOIN lockgate_runs r ON r.id = t.run_id
WHERE t.hash = %(hash)s;

-- name: callback_token_by_id
SELECT t.*, r.workflow, r.status AS run_status, r.payload AS run_payload
FROM lockgate_callback_tokens t JOIN lockgate_runs r ON r.id = t.run_id
WHERE t.id = %(id)s;

-- name: use_callback_token
-- Conditional on the row still being pending and unexpired: of two completions racing, the second
-- finds it completed (a single-use token) and writes nothing.
UPDATE lockgate_callback_tokens
SET uses = uses + 1, completed_at = %(now)s, status = CASE WHEN single_use = 1 THEN 'completed' ELSE status END
WHERE id = %(id)s AND status = 'pending' AND (expires_at IS NULL OR expires_at > %(now)s)
RETURNING id;

-- name: wake_token_waiter
-- The run parked on the token (or on anything: it then looks) becomes due now; a run being executed
-- finds the message by its own park.
UPDATE lockgate_runs SET wake_at = %(now)s, updated_at = %(now)s
WHERE id = %(run_id)s AND status = 'running' AND owner IS NULL AND (wake_at IS NULL OR wake_at > %(now)s);

-- name: run_callback_tokens
SELECT id, step_key, name, model, single_use, status, uses, created_at, expires_at, completed_at
FROM lockgate_callback_tokens WHERE run_id = %(run_id)s ORDER BY created_at, id;

-- name: forget_callback_tokens
DELETE FROM lockgate_callback_tokens WHERE run_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb));
