-- A run ended: a process awaiting its result (a client that started it, an engine it did not run on)
-- reads it at once instead of at its next poll (engine/results.py). On a channel of its own, which
-- only a process awaiting another process's run listens on: the others are not told of every end.
-- The payload is constant, so PostgreSQL folds one transaction's notifications into one: a group
-- commit ending a thousand runs notifies once, and the process that ended them skips its own.
CREATE FUNCTION lockgate_wake_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('lockgate_ended', json_build_array(
        COALESCE(current_setting('lockgate.origin', true), ''), 'ended', '')::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER lockgate_runs_wake_ended AFTER UPDATE OF status ON lockgate_runs FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled')
          AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION lockgate_wake_ended();
