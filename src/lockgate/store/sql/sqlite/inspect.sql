-- Read-only queries of the inspect layer (lists that page by a cursor).

-- name: inspect_ledger
-- Ledger rows matching the given filters (NULL: any), newest first; :before (a row id) pages on.
SELECT * FROM lockgate_ledger
WHERE (:workflow IS NULL OR workflow = :workflow)
  AND (:ticket IS NULL OR ticket = :ticket)
  AND (:kind IS NULL OR kind = :kind)
  AND (:outcome IS NULL OR outcome = :outcome)
  AND (:since IS NULL OR at >= :since)
  AND (:before IS NULL OR id < :before)
ORDER BY id DESC
LIMIT :limit;

-- name: inspect_pending
-- Parked starts matching the given filters (NULL: any) in arrival order; :after (a seq) pages on.
SELECT * FROM lockgate_pending
WHERE (:workflow IS NULL OR workflow = :workflow)
  AND (:mode IS NULL OR mode = :mode)
  AND (:after IS NULL OR seq > :after)
ORDER BY seq, id
LIMIT :limit;

-- name: inspect_runs_before
-- Runs matching the given filters (NULL: any) that come after the run :before_id (created at
-- :before_at) in newest-first order: a page that continues from a cursor, not an offset.
SELECT * FROM lockgate_runs
WHERE (:workflow IS NULL OR workflow = :workflow)
  AND (:status IS NULL OR status = :status)
  AND (:parent_id IS NULL OR parent_id = :parent_id)
  AND (created_at < :before_at OR (created_at = :before_at AND id < :before_id))
ORDER BY created_at DESC, id DESC
LIMIT :limit OFFSET :offset;
