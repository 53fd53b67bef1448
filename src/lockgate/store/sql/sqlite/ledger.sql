-- Reads of the ledger and of parked starts for the inspect layer (pages that continue from a cursor).

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
