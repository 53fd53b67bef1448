-- Key rotation (store/keys.py): stored values sealed for encrypted workflows, read a batch at a time in
-- primary-key order after a cursor, and written back sealed under the newest key only where they are still
-- what was read (a compare-and-swap%()s a worker that wrote meanwhile wins, and the value is seen next pass).
-- Kept in lockstep with sql/sqlite/keys.sql.

-- name: sealed_runs
SELECT id AS k1, '' AS k2, payload, output, error_message FROM lockgate_runs
WHERE id > %(after1)s AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s)
  AND (strpos(payload, '$sealed') > 0 OR strpos(output, '$sealed') > 0 OR strpos(error_message, '$sealed') > 0)
ORDER BY id LIMIT %(limit)s;

-- name: sealed_journal
SELECT run_id AS k1, step_key AS k2, output, error_message FROM lockgate_journal
WHERE (run_id, step_key) > (%(after1)s, %(after2)s)
  AND (%(workflow)s::text IS NULL OR run_id IN (SELECT id FROM lockgate_runs WHERE workflow = %(workflow)s))
  AND (strpos(output, '$sealed') > 0 OR strpos(error_message, '$sealed') > 0)
ORDER BY run_id, step_key LIMIT %(limit)s;

-- name: sealed_attempts
SELECT id AS k1, '' AS k2, input, error_message FROM lockgate_step_attempts
WHERE id > %(after1)s
  AND (%(workflow)s::text IS NULL OR run_id IN (SELECT id FROM lockgate_runs WHERE workflow = %(workflow)s))
  AND (strpos(input, '$sealed') > 0 OR strpos(error_message, '$sealed') > 0)
ORDER BY id LIMIT %(limit)s;

-- name: sealed_messages
SELECT id AS k1, '' AS k2, payload, result, error_message FROM lockgate_messages
WHERE id > %(after1)s
  AND (%(workflow)s::text IS NULL OR run_id IN (SELECT id FROM lockgate_runs WHERE workflow = %(workflow)s))
  AND (strpos(payload, '$sealed') > 0 OR strpos(result, '$sealed') > 0 OR strpos(error_message, '$sealed') > 0)
ORDER BY id LIMIT %(limit)s;

-- name: sealed_events
SELECT id AS k1, '' AS k2, data FROM lockgate_run_events
WHERE id > %(after1)s
  AND (%(workflow)s::text IS NULL OR run_id IN (SELECT id FROM lockgate_runs WHERE workflow = %(workflow)s))
  AND strpos(data, '$sealed') > 0
ORDER BY id LIMIT %(limit)s;

-- name: sealed_pending
SELECT id AS k1, '' AS k2, payload FROM lockgate_pending
WHERE id > %(after1)s AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s)
  AND strpos(payload, '$sealed') > 0
ORDER BY id LIMIT %(limit)s;

-- name: reseal_runs
UPDATE lockgate_runs SET payload = %(payload)s, output = %(output)s, error_message = %(error_message)s
WHERE id = %(k1)s
  AND payload IS NOT DISTINCT FROM %(old_payload)s AND output IS NOT DISTINCT FROM %(old_output)s
  AND error_message IS NOT DISTINCT FROM %(old_error_message)s
RETURNING id;

-- name: reseal_journal
UPDATE lockgate_journal SET output = %(output)s, error_message = %(error_message)s
WHERE run_id = %(k1)s AND step_key = %(k2)s
  AND output IS NOT DISTINCT FROM %(old_output)s AND error_message IS NOT DISTINCT FROM %(old_error_message)s
RETURNING run_id;

-- name: reseal_attempts
UPDATE lockgate_step_attempts SET input = %(input)s, error_message = %(error_message)s
WHERE id = %(k1)s AND input IS NOT DISTINCT FROM %(old_input)s
  AND error_message IS NOT DISTINCT FROM %(old_error_message)s
RETURNING id;

-- name: reseal_messages
UPDATE lockgate_messages SET payload = %(payload)s, result = %(result)s, error_message = %(error_message)s
WHERE id = %(k1)s AND payload IS NOT DISTINCT FROM %(old_payload)s AND result IS NOT DISTINCT FROM %(old_result)s
  AND error_message IS NOT DISTINCT FROM %(old_error_message)s
RETURNING id;

-- name: reseal_events
UPDATE lockgate_run_events SET data = %(data)s WHERE id = %(k1)s AND data IS NOT DISTINCT FROM %(old_data)s
RETURNING id;

-- name: reseal_pending
UPDATE lockgate_pending SET payload = %(payload)s WHERE id = %(k1)s AND payload IS NOT DISTINCT FROM %(old_payload)s
RETURNING id;
