-- Named views of the dashboard's runs list (store/views.py): a name and the query string of its
-- filters, so that a view saved by one operator opens the same for every other. Table for table
-- the same as migrations/postgres/0010_saved_views.sql.
CREATE TABLE lockgate_saved_views (
    name        TEXT PRIMARY KEY,
    query       TEXT NOT NULL,              -- the URL query string of the filters (workflow=...&status=...)
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
