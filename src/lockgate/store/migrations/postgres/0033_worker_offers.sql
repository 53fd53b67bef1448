-- What each worker takes (routing.py): its labels, and per workflow it takes the versions its code runs
-- and the patches it knows, as JSON. Registered as the worker starts; read by whoever asks which due
-- runs no live worker can take (doctor, /metrics, the dashboard, the routing sweep). Column for column
-- the same as migrations/sqlite/0033_worker_offers.sql.
ALTER TABLE lockgate_workers ADD COLUMN labels TEXT;
ALTER TABLE lockgate_workers ADD COLUMN offers TEXT;
