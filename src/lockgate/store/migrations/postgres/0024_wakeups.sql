-- Wake-ups between processes: a published domain event now wakes the event sweeps of the other
-- processes at once, as a claimable run and new gate work do since 0003_cluster.sql.
-- Table for table the same as migrations/sqlite/0024_wakeups.sql, where triggers count each
-- channel's changes in lockgate_wakeups for the other processes to read; unused here (NOTIFY).
CREATE TABLE lockgate_wakeups (
    channel TEXT PRIMARY KEY,
    seq     BIGINT NOT NULL
);

CREATE TRIGGER lockgate_events_wake AFTER INSERT ON lockgate_events FOR EACH STATEMENT
    EXECUTE FUNCTION lockgate_wake('events');
