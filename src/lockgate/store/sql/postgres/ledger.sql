-- Reads of the ledger and of parked starts for the inspect layer (pages that continue from a cursor).

-- name: inspect_ledger
-- Ledger rows matching the given filters (NULL: any), newest first; %(before)s (a row id) pages on.
SELECT * FROM lockgate_ledger
WHERE (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(ticket)s::text IS NULL OR ticket = %(ticket)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s::text)
  AND (%(since)s::double precision IS NULL OR at >= %(since)s::double precision)
  AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: inspect_pending
-- Parked starts matching the given filters (NULL: any) in arrival order; %(after)s (a seq) pages on.
SELECT * FROM lockgate_pending
WHERE (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(mode)s::text IS NULL OR mode = %(mode)s::text)
  AND (%(after)s::bigint IS NULL OR seq > %(after)s::bigint)
ORDER BY seq, id
LIMIT %(limit)s;
