-- Wake-ups between processes sharing the file. SQLite has no LISTEN/NOTIFY: these triggers count,
-- per channel, the changes PostgreSQL's triggers of 0003_cluster.sql notify (and a new event, as
-- 0024 there does), and every other process's store checks PRAGMA data_version every few
-- milliseconds and, when another connection committed, reads these counters to tell which
-- channels moved (store/sqlite_wakeups.py). A counter moved by this process's own commit wakes
-- it once more than needed, never less. Table for table the same as
-- migrations/postgres/0024_wakeups.sql.
CREATE TABLE lockgate_wakeups (
    channel TEXT PRIMARY KEY,
    seq     INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO lockgate_wakeups (channel, seq) VALUES ('runs', 0), ('gate', 0), ('events', 0);

-- A run became claimable: created, parked (timer, signal, child), woken, released, resumed.
-- Claims, lease renewals and step writes leave status/owner/wake_at alone and count nothing.
CREATE TRIGGER lockgate_runs_wake_insert AFTER INSERT ON lockgate_runs FOR EACH ROW
    WHEN NEW.status = 'running' AND NEW.owner IS NULL AND NEW.wake_at IS NOT NULL
BEGIN
    UPDATE lockgate_wakeups SET seq = seq + 1 WHERE channel = 'runs';
END;
CREATE TRIGGER lockgate_runs_wake_update AFTER UPDATE OF status, owner, wake_at ON lockgate_runs FOR EACH ROW
    WHEN NEW.status = 'running' AND NEW.owner IS NULL AND NEW.wake_at IS NOT NULL
         AND (OLD.status <> 'running' OR OLD.owner IS NOT NULL OR OLD.wake_at IS NOT NEW.wake_at)
BEGIN
    UPDATE lockgate_wakeups SET seq = seq + 1 WHERE channel = 'runs';
END;

-- Gate work appeared: a start parked (or re-parked under another control), a parked row fell due
-- sooner, a concurrency slot was freed, a pause ended or changed. A debounce fold only pushes its
-- due time later and counts nothing.
CREATE TRIGGER lockgate_pending_wake_insert AFTER INSERT ON lockgate_pending FOR EACH ROW
BEGIN
    UPDATE lockgate_wakeups SET seq = seq + 1 WHERE channel = 'gate';
END;
CREATE TRIGGER lockgate_pending_wake_update AFTER UPDATE OF due_at, mode ON lockgate_pending FOR EACH ROW
    WHEN (NEW.due_at IS NOT NULL AND (OLD.due_at IS NULL OR NEW.due_at < OLD.due_at))
         OR NEW.mode IS NOT OLD.mode
BEGIN
    UPDATE lockgate_wakeups SET seq = seq + 1 WHERE channel = 'gate';
END;
CREATE TRIGGER lockgate_slots_wake AFTER DELETE ON lockgate_slots FOR EACH ROW
BEGIN
    UPDATE lockgate_wakeups SET seq = seq + 1 WHERE channel = 'gate';
END;
CREATE TRIGGER lockgate_pauses_wake_update AFTER UPDATE ON lockgate_pauses FOR EACH ROW
BEGIN
    UPDATE lockgate_wakeups SET seq = seq + 1 WHERE channel = 'gate';
END;
CREATE TRIGGER lockgate_pauses_wake_delete AFTER DELETE ON lockgate_pauses FOR EACH ROW
BEGIN
    UPDATE lockgate_wakeups SET seq = seq + 1 WHERE channel = 'gate';
END;

-- A domain event was published: the event sweeps fan it out (and cancel-on reads it) at once.
CREATE TRIGGER lockgate_events_wake AFTER INSERT ON lockgate_events FOR EACH ROW
BEGIN
    UPDATE lockgate_wakeups SET seq = seq + 1 WHERE channel = 'events';
END;
