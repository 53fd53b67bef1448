-- Run streams (store/streams.py). Kept in lockstep with sql/postgres/streams.sql.

-- name: append_chunks
-- Chunks as one JSON array, each naming its run and the lease (owner, epoch) it was written under: a
-- row is written only while its run is held so and running, so fewer rows than given means a lease
-- moved on. In the array's order, so ids follow seq.
INSERT INTO lockgate_stream_chunks (run_id, topic, seq, kind, step_key, attempt, data, size, created_at)
SELECT r.id, json_extract(j.value, '$.topic'), json_extract(j.value, '$.seq'), json_extract(j.value, '$.kind'),
    json_extract(j.value, '$.step_key'), json_extract(j.value, '$.attempt'), json_extract(j.value, '$.data'),
    json_extract(j.value, '$.size'), json_extract(j.value, '$.created_at')
FROM json_each(:rows) j
JOIN lockgate_runs r ON r.id = json_extract(j.value, '$.run_id') AND r.owner = json_extract(j.value, '$.owner')
    AND r.epoch = json_extract(j.value, '$.epoch') AND r.status = 'running'
ORDER BY j.key;

-- name: stream_state
-- What an execution that streams again needs: per topic, step and attempt, the last seq, counts and bytes.
SELECT topic, kind, step_key, attempt, max(seq) AS last, count(*) AS n, coalesce(sum(size), 0) AS bytes
FROM lockgate_stream_chunks WHERE run_id = :run_id
GROUP BY topic, kind, step_key, attempt;

-- name: stream_chunks
SELECT id, run_id, topic, seq, kind, step_key, attempt, data, created_at FROM lockgate_stream_chunks
WHERE run_id = :run_id AND topic = :topic AND seq > :after
ORDER BY seq
LIMIT :limit;

-- name: stream_tail
-- Chunks of every run committed after :after (by id): what a process's readers are handed.
SELECT id, run_id, topic, seq, kind, step_key, attempt, data, created_at FROM lockgate_stream_chunks
WHERE id > :after
ORDER BY id
LIMIT :limit;

-- name: stream_last_id
SELECT coalesce(max(id), 0) AS id FROM lockgate_stream_chunks;

-- name: insert_secret
INSERT INTO lockgate_secrets (name, value, created_at) VALUES (:name, :value, :now)
ON CONFLICT (name) DO NOTHING;

-- name: get_secret
SELECT value FROM lockgate_secrets WHERE name = :name;
