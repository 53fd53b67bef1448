-- Clustering: each worker's lease (so `lockgate cluster status` can tell a stale worker).
-- Column for column the same as migrations/postgres/0003_cluster.sql; the PostgreSQL wake-up
-- triggers have no twin here (one process, woken in memory).

ALTER TABLE lockgate_workers ADD COLUMN lease REAL;
