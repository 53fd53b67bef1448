-- A wake-up names who raised it and the transaction it came from (the writing store's origin and the
-- transaction's id), so that the workers told of it agree, each on its own, which of them claims first
-- (engine/claim_order.py) instead of all claiming at once; the one that raised it is not among them (it
-- woke itself in memory). The token is constant within a transaction: PostgreSQL still folds one
-- transaction's notifications into one, so a group commit of a thousand rows wakes once.
CREATE OR REPLACE FUNCTION lockgate_wake() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    origin TEXT := COALESCE(current_setting('lockgate.origin', true), '');
BEGIN
    PERFORM pg_notify('lockgate', json_build_array(
        origin, TG_ARGV[0], origin || ':' || pg_current_xact_id()::text)::text);
    RETURN NULL;
END
$$;

-- Each worker's store origin, to tell which worker raised a wake-up.
ALTER TABLE lockgate_workers ADD COLUMN origin TEXT;

-- A worker started (or started again under its id) or stopped: the others read the live workers
-- again at once, rather than at their next heartbeat, to agree on who claims first.
CREATE TRIGGER lockgate_workers_wake AFTER INSERT OR UPDATE OF stopped_at ON lockgate_workers FOR EACH ROW
    EXECUTE FUNCTION lockgate_wake('workers');
