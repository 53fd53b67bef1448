-- Pages of runs for the surfaces (inspect/listing.py), newest first: created_at, then id, descending.
--
-- Every filter is in every query (NULL: any); the queries differ in the one condition an index
-- can drive, which store/listing.py picks from the filters given. The page continues below the
-- position (upper_at, upper_id) and stays at or above lower_at: both always bound created_at,
-- so a deep page starts where the previous one stopped instead of walking past it.

-- name: runs_page_by_time
-- Driven by the creation-time index walked newest first.
SELECT * FROM lockgate_runs
WHERE (:workflow IS NULL OR workflow = :workflow)
  AND (:status IS NULL OR status = :status)
  AND (:parent_id IS NULL OR parent_id = :parent_id)
  AND (:source IS NULL OR source = :source)
  AND (:id_prefix IS NULL OR substr(id, 1, length(:id_prefix)) = :id_prefix)
  AND (:dead_letter = 0 OR discarded_at IS NULL)
  AND created_at >= :lower_at AND created_at <= :upper_at
  AND (created_at < :upper_at OR id < :upper_id)
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: runs_page_by_workflow
-- Driven by the (workflow, status, created_at) index: one workflow in one status.
SELECT * FROM lockgate_runs
WHERE workflow = :workflow AND status = :status
  AND (:parent_id IS NULL OR parent_id = :parent_id)
  AND (:source IS NULL OR source = :source)
  AND (:id_prefix IS NULL OR substr(id, 1, length(:id_prefix)) = :id_prefix)
  AND (:dead_letter = 0 OR discarded_at IS NULL)
  AND created_at >= :lower_at AND created_at <= :upper_at
  AND (created_at < :upper_at OR id < :upper_id)
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: runs_page_by_status
-- Driven by the (status, created_at) index of runs that are not running (the literal test lets
-- the planner use that partial index; the op sends running runs elsewhere).
SELECT * FROM lockgate_runs
WHERE status = :status AND status <> 'running'
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:parent_id IS NULL OR parent_id = :parent_id)
  AND (:source IS NULL OR source = :source)
  AND (:id_prefix IS NULL OR substr(id, 1, length(:id_prefix)) = :id_prefix)
  AND (:dead_letter = 0 OR discarded_at IS NULL)
  AND created_at >= :lower_at AND created_at <= :upper_at
  AND (created_at < :upper_at OR id < :upper_id)
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: runs_page_by_source
-- Driven by the (source, created_at) index.
SELECT * FROM lockgate_runs
WHERE source = :source
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:status IS NULL OR status = :status)
  AND (:parent_id IS NULL OR parent_id = :parent_id)
  AND (:id_prefix IS NULL OR substr(id, 1, length(:id_prefix)) = :id_prefix)
  AND (:dead_letter = 0 OR discarded_at IS NULL)
  AND created_at >= :lower_at AND created_at <= :upper_at
  AND (created_at < :upper_at OR id < :upper_id)
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: runs_page_by_parent
-- Driven by the (parent_id) index: one run's children.
SELECT * FROM lockgate_runs
WHERE parent_id = :parent_id
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:status IS NULL OR status = :status)
  AND (:source IS NULL OR source = :source)
  AND (:id_prefix IS NULL OR substr(id, 1, length(:id_prefix)) = :id_prefix)
  AND (:dead_letter = 0 OR discarded_at IS NULL)
  AND created_at >= :lower_at AND created_at <= :upper_at
  AND (created_at < :upper_at OR id < :upper_id)
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: runs_page_by_id
-- Driven by the primary key: ids that start with a prefix lie in [id_lo, id_hi). The unary + keeps
-- the planner off the creation-time index, which it would otherwise walk instead.
SELECT * FROM lockgate_runs
WHERE id >= :id_lo AND id < :id_hi
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:status IS NULL OR status = :status)
  AND (:parent_id IS NULL OR parent_id = :parent_id)
  AND (:source IS NULL OR source = :source)
  AND (:id_prefix IS NULL OR substr(id, 1, length(:id_prefix)) = :id_prefix)
  AND (:dead_letter = 0 OR discarded_at IS NULL)
  AND +created_at >= :lower_at AND +created_at <= :upper_at
  AND (created_at < :upper_at OR id < :upper_id)
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: runs_per_hour
-- Runs created since :since per workflow, hour (seconds since the epoch / 3600) and status: a
-- range of the creation-time index, however large the table (named: without statistics the
-- planner prefers scanning the whole covering (workflow, status, created_at) index).
SELECT workflow, CAST(created_at / 3600 AS INTEGER) AS hour, status, COUNT(*) AS n
FROM lockgate_runs INDEXED BY lockgate_runs_created
WHERE created_at >= :since AND (:workflow IS NULL OR workflow = :workflow)
GROUP BY workflow, hour, status;
