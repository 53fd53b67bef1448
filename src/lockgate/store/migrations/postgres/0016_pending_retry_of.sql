-- 0002 gained lockgate_pending.retry_of after it had shipped: a store made before lacks it.
ALTER TABLE lockgate_pending ADD COLUMN IF NOT EXISTS retry_of TEXT;
