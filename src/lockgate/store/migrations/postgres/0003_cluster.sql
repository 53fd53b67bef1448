-- Clustering: each worker's lease (so `lockgate cluster status` can tell a stale worker), and
-- wake-ups raised by the database itself at the moment work becomes available.
-- Column for column the same as migrations/sqlite/0003_cluster.sql (SQLite has no triggers here:
-- one process, woken in memory).

ALTER TABLE lockgate_workers ADD COLUMN lease DOUBLE PRECISION;

-- Wake-ups travel on the 'lockgate' channel as JSON [origin, channel, payload] (store/postgres.py).
-- The origin is the writing store's session setting, so a process skips the wake-ups it caused
-- (it woke itself in memory). The payload is constant per channel: PostgreSQL folds identical
-- notifications of one transaction into one, so a group commit of a thousand rows wakes once.
CREATE FUNCTION lockgate_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('lockgate', json_build_array(
        COALESCE(current_setting('lockgate.origin', true), ''), TG_ARGV[0], '')::text);
    RETURN NULL;
END
$$;

-- A run became claimable: created, parked (timer, signal, child), woken, released, resumed.
-- Claims, lease renewals and step writes leave status/owner/wake_at alone and wake nobody.
CREATE TRIGGER lockgate_runs_wake_insert AFTER INSERT ON lockgate_runs FOR EACH ROW
    WHEN (NEW.status = 'running' AND NEW.owner IS NULL AND NEW.wake_at IS NOT NULL)
    EXECUTE FUNCTION lockgate_wake('runs');
CREATE TRIGGER lockgate_runs_wake_update AFTER UPDATE OF status, owner, wake_at ON lockgate_runs FOR EACH ROW
    WHEN (NEW.status = 'running' AND NEW.owner IS NULL AND NEW.wake_at IS NOT NULL
          AND (OLD.status <> 'running' OR OLD.owner IS NOT NULL OR OLD.wake_at IS DISTINCT FROM NEW.wake_at))
    EXECUTE FUNCTION lockgate_wake('runs');

-- Gate work appeared: a start parked (or re-parked under another control), a parked row fell due
-- sooner, a concurrency slot was freed, a pause ended or changed. A debounce fold only pushes its
-- due time later and wakes nobody.
CREATE TRIGGER lockgate_pending_wake_insert AFTER INSERT ON lockgate_pending FOR EACH ROW
    EXECUTE FUNCTION lockgate_wake('gate');
CREATE TRIGGER lockgate_pending_wake_update AFTER UPDATE OF due_at, mode ON lockgate_pending FOR EACH ROW
    WHEN ((NEW.due_at IS NOT NULL AND (OLD.due_at IS NULL OR NEW.due_at < OLD.due_at))
          OR NEW.mode IS DISTINCT FROM OLD.mode)
    EXECUTE FUNCTION lockgate_wake('gate');
CREATE TRIGGER lockgate_slots_wake AFTER DELETE ON lockgate_slots FOR EACH ROW
    EXECUTE FUNCTION lockgate_wake('gate');
CREATE TRIGGER lockgate_pauses_wake AFTER UPDATE OR DELETE ON lockgate_pauses FOR EACH ROW
    EXECUTE FUNCTION lockgate_wake('gate');
