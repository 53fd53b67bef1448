-- The gate's admissions over time, for the dashboard's sparklines (store/activity.py). Kept in
-- lockstep with sql/postgres/activity.sql.

-- name: admissions_per_bucket
-- Admissions since :since per workflow, key and bucket of :width seconds (bucket 0 starts at :since):
-- one grouped read over the period's ledger rows, served by the ledger's index on at.
SELECT workflow, COALESCE(key, '') AS key, CAST((at - :since) / :width AS INTEGER) AS bucket, COUNT(*) AS n
FROM lockgate_ledger
WHERE at >= :since AND outcome = 'admitted' AND (:workflow IS NULL OR workflow = :workflow)
GROUP BY workflow, COALESCE(key, ''), CAST((at - :since) / :width AS INTEGER);
