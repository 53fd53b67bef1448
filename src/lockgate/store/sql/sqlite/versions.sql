-- Run versions: which due runs no live worker's code can take, and an operator's restamp (store/versions.py).

-- name: due_groups
-- Due runs no worker holds, by workflow, version and patches (routing.judge tells which no live worker
-- takes): read by the routing sweep, doctor and /metrics, never on a run's path; the runnable index
-- bounds it to the due runs.
SELECT workflow, version, patches, COUNT(*) AS n, MIN(wake_at) AS oldest,
    SUM(CASE WHEN waiting_on = 'version' THEN 1 ELSE 0 END) AS marked
FROM lockgate_runs
WHERE status = 'running' AND wake_at <= :now AND owner IS NULL
GROUP BY workflow, version, patches;

-- name: mark_waiting_version
-- Due runs of one workflow, version and patches no live worker can execute: shown as waiting for a
-- version (what waits, and what live workers offer, in waiting_for beside what was there). Their
-- wake time stays: the first worker that takes them claims them.
UPDATE lockgate_runs
SET waiting_on = 'version', waiting_for = json_set(COALESCE(waiting_for, '{}'), '$.version', :version, '$.offered', json(:offered))
WHERE status = 'running' AND wake_at <= :now AND owner IS NULL AND workflow = :workflow
  AND version IS :version AND patches = :patches
  AND (waiting_on IS NULL OR waiting_on <> 'version')
RETURNING id;

-- name: migrate_versions
-- An operator's declaration that live runs stamped from_version may resume under other code: restamped.
UPDATE lockgate_runs SET version = :to_version, updated_at = :now
WHERE status IN ('running', 'suspended') AND version IS :from_version
  AND (:workflow IS NULL OR workflow = :workflow) AND (:run_id IS NULL OR id = :run_id)
RETURNING id, workflow, status;

-- name: runs_of_version
-- What migrate_versions would restamp (a dry run), through the workflow index or the primary key.
SELECT id, workflow, status FROM lockgate_runs
WHERE status IN ('running', 'suspended') AND version IS :from_version
  AND (:workflow IS NULL OR workflow = :workflow) AND (:run_id IS NULL OR id = :run_id)
ORDER BY created_at, id LIMIT :limit;
