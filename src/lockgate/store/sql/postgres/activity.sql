-- The gate's admissions over time, for the dashboard's sparklines (store/activity.py). Kept in
-- lockstep with sql/sqlite/activity.sql.

-- name: admissions_per_bucket
-- Admissions since :since per workflow, key and bucket of :width seconds (bucket 0 starts at :since):
-- one grouped read over the period's ledger rows, served by the ledger's index on at.
SELECT workflow, COALESCE(key, '') AS key,
    FLOOR((at - %(since)s::double precision) / %(width)s::double precision)::integer AS bucket, COUNT(*) AS n
FROM lockgate_ledger
WHERE at >= %(since)s::double precision AND outcome = 'admitted'
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
GROUP BY 1, 2, 3;
