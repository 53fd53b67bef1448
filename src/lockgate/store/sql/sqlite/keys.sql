-- Key rotation (store/keys.py): stored values sealed for encrypted workflows, read a batch at a time in
-- primary-key order after a cursor, and written back sealed under the newest key only where they are still
-- what was read (a compare-and-swap: a worker that wrote meanwhile wins, and the value is seen next pass).
-- Kept in lockstep with sql/postgres/keys.sql.

-- name: sealed_runs
SELECT id AS k1, '' AS k2, payload, output, error_message FROM lockgate_runs
WHERE id > :after1 AND (:workflow IS NULL OR workflow = :workflow)
  AND (instr(payload, '$sealed') > 0 OR instr(output, '$sealed') > 0 OR instr(error_message, '$sealed') > 0)
ORDER BY id LIMIT :limit;

-- name: sealed_journal
SELECT run_id AS k1, step_key AS k2, output, error_message FROM lockgate_journal
WHERE (run_id, step_key) > (:after1, :after2)
  AND (:workflow IS NULL OR run_id IN (SELECT id FROM lockgate_runs WHERE workflow = :workflow))
  AND (instr(output, '$sealed') > 0 OR instr(error_message, '$sealed') > 0)
ORDER BY run_id, step_key LIMIT :limit;

-- name: sealed_attempts
SELECT id AS k1, '' AS k2, input, error_message FROM lockgate_step_attempts
WHERE id > :after1 AND (:workflow IS NULL OR run_id IN (SELECT id FROM lockgate_runs WHERE workflow = :workflow))
  AND (instr(input, '$sealed') > 0 OR instr(error_message, '$sealed') > 0)
ORDER BY id LIMIT :limit;

-- name: sealed_messages
SELECT id AS k1, '' AS k2, payload, result, error_message FROM lockgate_messages
WHERE id > :after1 AND (:workflow IS NULL OR run_id IN (SELECT id FROM lockgate_runs WHERE workflow = :workflow))
  AND (instr(payload, '$sealed') > 0 OR instr(result, '$sealed') > 0 OR instr(error_message, '$sealed') > 0)
ORDER BY id LIMIT :limit;

-- name: sealed_events
SELECT id AS k1, '' AS k2, data FROM lockgate_run_events
WHERE id > :after1 AND (:workflow IS NULL OR run_id IN (SELECT id FROM lockgate_runs WHERE workflow = :workflow))
  AND instr(data, '$sealed') > 0
ORDER BY id LIMIT :limit;

-- name: sealed_pending
SELECT id AS k1, '' AS k2, payload FROM lockgate_pending
WHERE id > :after1 AND (:workflow IS NULL OR workflow = :workflow) AND instr(payload, '$sealed') > 0
ORDER BY id LIMIT :limit;

-- name: reseal_runs
UPDATE lockgate_runs SET payload = :payload, output = :output, error_message = :error_message
WHERE id = :k1 AND payload IS :old_payload AND output IS :old_output AND error_message IS :old_error_message
RETURNING id;

-- name: reseal_journal
UPDATE lockgate_journal SET output = :output, error_message = :error_message
WHERE run_id = :k1 AND step_key = :k2 AND output IS :old_output AND error_message IS :old_error_message
RETURNING run_id;

-- name: reseal_attempts
UPDATE lockgate_step_attempts SET input = :input, error_message = :error_message
WHERE id = :k1 AND input IS :old_input AND error_message IS :old_error_message
RETURNING id;

-- name: reseal_messages
UPDATE lockgate_messages SET payload = :payload, result = :result, error_message = :error_message
WHERE id = :k1 AND payload IS :old_payload AND result IS :old_result AND error_message IS :old_error_message
RETURNING id;

-- name: reseal_events
UPDATE lockgate_run_events SET data = :data WHERE id = :k1 AND data IS :old_data
RETURNING id;

-- name: reseal_pending
UPDATE lockgate_pending SET payload = :payload WHERE id = :k1 AND payload IS :old_payload
RETURNING id;
