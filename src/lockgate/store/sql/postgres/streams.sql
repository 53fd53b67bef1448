-- Run streams (store/streams.py). Kept in lockstep with sql/sqlite/streams.sql.

-- name: append_chunks
-- Chunks as one JSON array, each naming its run and the lease (owner, epoch) it was written under: a
-- row is written only while its run is held so and running, so fewer rows than given means a lease
-- moved on. FOR SHARE keeps a claim from taking a run over before this commits. By seq within each
-- run and topic, so ids follow seq.
WITH j AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS x(
        run_id text, owner text, epoch bigint, topic text, seq bigint, kind text, step_key text, attempt integer,
        data text, size integer, created_at double precision
    )
), held AS (
    SELECT r.id, r.owner, r.epoch FROM lockgate_runs r
    WHERE r.id IN (SELECT run_id FROM j) AND r.status = 'running'
    FOR SHARE
)
INSERT INTO lockgate_stream_chunks (run_id, topic, seq, kind, step_key, attempt, data, size, created_at)
SELECT j.run_id, j.topic, j.seq, j.kind, j.step_key, j.attempt, j.data, j.size, j.created_at
FROM j JOIN held ON held.id = j.run_id AND held.owner = j.owner AND held.epoch = j.epoch
ORDER BY j.run_id, j.topic, j.seq;

-- name: stream_state
-- What an execution that streams again needs: per topic, step and attempt, the last seq, counts and bytes.
SELECT topic, kind, step_key, attempt, max(seq) AS last, count(*) AS n, coalesce(sum(size), 0) AS bytes
FROM lockgate_stream_chunks WHERE run_id = %(run_id)s
GROUP BY topic, kind, step_key, attempt;

-- name: stream_chunks
SELECT id, run_id, topic, seq, kind, step_key, attempt, data, created_at FROM lockgate_stream_chunks
WHERE run_id = %(run_id)s AND topic = %(topic)s AND seq > %(after)s
ORDER BY seq
LIMIT %(limit)s;

-- name: stream_tail
-- Chunks of every run committed after :after (by id): what a process's readers are handed.
SELECT id, run_id, topic, seq, kind, step_key, attempt, data, created_at FROM lockgate_stream_chunks
WHERE id > %(after)s
ORDER BY id
LIMIT %(limit)s;

-- name: stream_last_id
SELECT coalesce(max(id), 0) AS id FROM lockgate_stream_chunks;

-- name: insert_secret
INSERT INTO lockgate_secrets (name, value, created_at) VALUES (%(name)s, %(value)s, %(now)s)
ON CONFLICT (name) DO NOTHING;

-- name: get_secret
SELECT value FROM lockgate_secrets WHERE name = %(name)s;
