-- A run ended: a process awaiting its result (a client that started it, an engine it did not run on)
-- reads it at once instead of at its next poll (engine/results.py). The payload is constant, so
-- PostgreSQL folds one transaction's notifications into one: a group commit ending a thousand runs
-- notifies once, and the process that ended them skips its own (the origin).
CREATE TRIGGER lockgate_runs_wake_ended AFTER UPDATE OF status ON lockgate_runs FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled')
          AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION lockgate_wake('ended');
