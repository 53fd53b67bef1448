-- Saved views of the dashboard's runs list (store/views.py). Kept in lockstep with sql/postgres/views.sql.

-- name: save_view
-- repeatable: an upsert of the same name and query leaves the same row
INSERT INTO lockgate_saved_views (name, query, created_at, updated_at)
VALUES (:name, :query, :now, :now)
ON CONFLICT (name) DO UPDATE SET query = excluded.query, updated_at = excluded.updated_at;

-- name: list_saved_views
SELECT name, query, created_at, updated_at FROM lockgate_saved_views ORDER BY name LIMIT :limit;

-- name: get_saved_view
SELECT name, query, created_at, updated_at FROM lockgate_saved_views WHERE name = :name;

-- name: delete_saved_view
DELETE FROM lockgate_saved_views WHERE name = :name RETURNING name;
