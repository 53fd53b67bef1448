-- Pages of runs for the surfaces (inspect/listing.py), newest first: created_at, then id, descending.
--
-- Every filter is in every query (NULL: any); the queries differ in the one condition an index
-- can drive, which store/listing.py picks from the filters given. The page continues below the
-- position (upper_at, upper_id) and stays at or above lower_at: both always bound created_at,
-- so a deep page starts where the previous one stopped instead of walking past it.
--
-- Each is planned for its values (-- unprepared): a plan kept for the statement guesses that the
-- creation-time bounds, often the whole span, are narrow, and walks that index instead of the
-- one the query is driven by (ten times slower on 100,000 runs).
--
-- No lower bound (lower_at at -1e300, the store's -FOREVER) folds away when planned: given one below its
-- statistics, the planner reads the smallest created_at from the index at each plan, stepping over every
-- entry of the runs retention deleted and no vacuum has removed yet (PostgreSQL 15): 1,900 index pages,
-- 7 to 28 ms a plan, at ten million runs after a day of a million was retired.

-- name: runs_page_by_time
-- unprepared: see above
-- Driven by the creation-time index walked newest first.
SELECT * FROM lockgate_runs
WHERE (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(parent_id)s::text IS NULL OR parent_id = %(parent_id)s::text)
  AND (%(source)s::text IS NULL OR source = %(source)s::text)
  AND (%(id_prefix)s::text IS NULL OR starts_with(id, %(id_prefix)s::text))
  AND (%(dead_letter)s = 0 OR discarded_at IS NULL)
  AND (%(lower_at)s <= -1e300 OR created_at >= %(lower_at)s) AND created_at <= %(upper_at)s
  AND (created_at < %(upper_at)s OR id < %(upper_id)s::text)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: runs_page_by_workflow
-- unprepared: see above
-- Driven by the (workflow, status, created_at) index: one workflow in one status.
SELECT * FROM lockgate_runs
WHERE workflow = %(workflow)s::text AND status = %(status)s::text
  AND (%(parent_id)s::text IS NULL OR parent_id = %(parent_id)s::text)
  AND (%(source)s::text IS NULL OR source = %(source)s::text)
  AND (%(id_prefix)s::text IS NULL OR starts_with(id, %(id_prefix)s::text))
  AND (%(dead_letter)s = 0 OR discarded_at IS NULL)
  AND (%(lower_at)s <= -1e300 OR created_at >= %(lower_at)s) AND created_at <= %(upper_at)s
  AND (created_at < %(upper_at)s OR id < %(upper_id)s::text)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: runs_page_by_status
-- unprepared: see above
-- Driven by the (status, created_at) index of runs that are not running (the literal test lets
-- the planner use that partial index; the op sends running runs elsewhere).
SELECT * FROM lockgate_runs
WHERE status = %(status)s::text AND status <> 'running'
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(parent_id)s::text IS NULL OR parent_id = %(parent_id)s::text)
  AND (%(source)s::text IS NULL OR source = %(source)s::text)
  AND (%(id_prefix)s::text IS NULL OR starts_with(id, %(id_prefix)s::text))
  AND (%(dead_letter)s = 0 OR discarded_at IS NULL)
  AND (%(lower_at)s <= -1e300 OR created_at >= %(lower_at)s) AND created_at <= %(upper_at)s
  AND (created_at < %(upper_at)s OR id < %(upper_id)s::text)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: runs_page_by_source
-- unprepared: see above
-- Driven by the (source, created_at) index.
SELECT * FROM lockgate_runs
WHERE source = %(source)s::text
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(parent_id)s::text IS NULL OR parent_id = %(parent_id)s::text)
  AND (%(id_prefix)s::text IS NULL OR starts_with(id, %(id_prefix)s::text))
  AND (%(dead_letter)s = 0 OR discarded_at IS NULL)
  AND (%(lower_at)s <= -1e300 OR created_at >= %(lower_at)s) AND created_at <= %(upper_at)s
  AND (created_at < %(upper_at)s OR id < %(upper_id)s::text)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: runs_page_by_parent
-- unprepared: see above
-- Driven by the (parent_id) index: one run's children.
SELECT * FROM lockgate_runs
WHERE parent_id = %(parent_id)s::text
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(source)s::text IS NULL OR source = %(source)s::text)
  AND (%(id_prefix)s::text IS NULL OR starts_with(id, %(id_prefix)s::text))
  AND (%(dead_letter)s = 0 OR discarded_at IS NULL)
  AND (%(lower_at)s <= -1e300 OR created_at >= %(lower_at)s) AND created_at <= %(upper_at)s
  AND (created_at < %(upper_at)s OR id < %(upper_id)s::text)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: runs_page_by_id
-- unprepared: see above
-- Driven by the primary key: ids that start with a prefix lie in [id_lo, id_hi).
SELECT * FROM lockgate_runs
WHERE id >= %(id_lo)s::text AND id < %(id_hi)s::text
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(parent_id)s::text IS NULL OR parent_id = %(parent_id)s::text)
  AND (%(source)s::text IS NULL OR source = %(source)s::text)
  AND (%(id_prefix)s::text IS NULL OR starts_with(id, %(id_prefix)s::text))
  AND (%(dead_letter)s = 0 OR discarded_at IS NULL)
  AND (%(lower_at)s <= -1e300 OR created_at >= %(lower_at)s) AND created_at <= %(upper_at)s
  AND (created_at < %(upper_at)s OR id < %(upper_id)s::text)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: runs_per_hour
-- unprepared: see above
-- Runs created since %(since)s per workflow, hour (seconds since the epoch / 3600) and status: a
-- range of the creation-time index, however large the table.
SELECT workflow, floor(created_at / 3600)::bigint AS hour, status, COUNT(*) AS n
FROM lockgate_runs
WHERE created_at >= %(since)s AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
GROUP BY workflow, hour, status;
