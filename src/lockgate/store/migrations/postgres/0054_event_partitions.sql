-- Time-partitioned domain events and deliveries (docs/history.md): lockgate_events by range of occurred_at,
-- lockgate_deliveries by range of created_at (a delivery is written with its event, at its time: the two
-- tables' partitions of an interval hold an event and its deliveries together), with the run history's
-- intervals and suffixes. The retention sweep drops their partitions past event_retention and
-- delivery_retention, a pending delivery (and the event it delivers) moved to the default partition first.
--
-- An event's id stays a key across all events: a webhook publishes under the provider's delivery id, so that
-- its retry is the same event. PostgreSQL keeps a unique index of a partitioned table only with the partition
-- key in it, so the ids publishers give are kept in lockgate_event_ids (id, occurred_at), not partitioned,
-- written in the publish's transaction: a second publish under one id fails there, whichever partition the
-- first went to. The ids lockgate makes are unique by making (a time, then 72 random bits, increasing in a
-- process) and are not written there. An event's key in its table becomes (id, occurred_at); a delivery's
-- (id, created_at), its one-delivery-a-trigger (event_id, trigger_name, created_at): an event's deliveries
-- share its time, so this is the same rule, checked within the event's partition.
--
-- Each table as it is becomes its first partition (_p0, bound at now, or past its newest row if a host's clock
-- ran ahead), attached; its key index is built again with the time in it: the window is one index build over
-- each (two over the deliveries) and a copy of the events' ids, under an exclusive lock (publishes and
-- deliveries wait; none fails). SQLite keeps its tables (0054 there is empty).

DO $$
DECLARE
    bound DOUBLE PRECISION := extract(epoch FROM clock_timestamp());
BEGIN
    LOCK TABLE lockgate_journal IN SHARE UPDATE EXCLUSIVE MODE;  -- no history partition made meanwhile
    LOCK TABLE lockgate_events, lockgate_deliveries IN ACCESS EXCLUSIVE MODE;
    bound := greatest(bound, (SELECT max(occurred_at) + 0.001 FROM lockgate_events),
                      (SELECT max(created_at) + 0.001 FROM lockgate_deliveries));

    -- Every id known so far: those given by publishers cannot be told from the others.
    CREATE TABLE lockgate_event_ids (
        id          TEXT PRIMARY KEY,
        occurred_at DOUBLE PRECISION NOT NULL
    );
    INSERT INTO lockgate_event_ids (id, occurred_at) SELECT id, occurred_at FROM lockgate_events;
    CREATE INDEX lockgate_event_ids_at ON lockgate_event_ids (occurred_at);

    ALTER TABLE lockgate_events RENAME TO lockgate_events_p0;
    ALTER TABLE lockgate_events_p0 DROP CONSTRAINT lockgate_events_pkey;
    ALTER INDEX lockgate_events_name RENAME TO lockgate_events_p0_name;
    ALTER INDEX lockgate_events_at RENAME TO lockgate_events_p0_at;
    ALTER INDEX lockgate_events_unswept RENAME TO lockgate_events_p0_unswept;
    DROP TRIGGER lockgate_events_wake ON lockgate_events_p0;
    CREATE TABLE lockgate_events (LIKE lockgate_events_p0 INCLUDING DEFAULTS) PARTITION BY RANGE (occurred_at);
    ALTER TABLE lockgate_events ADD CONSTRAINT lockgate_events_pkey PRIMARY KEY (id, occurred_at);
    CREATE INDEX lockgate_events_name ON lockgate_events (name, occurred_at);
    CREATE INDEX lockgate_events_at ON lockgate_events (occurred_at);
    CREATE INDEX lockgate_events_unswept ON lockgate_events (occurred_at) WHERE cancel_swept_at IS NULL;
    EXECUTE format('ALTER TABLE lockgate_events ATTACH PARTITION lockgate_events_p0 FOR VALUES FROM (MINVALUE) TO (%s)',
        bound);
    CREATE TABLE lockgate_events_kept PARTITION OF lockgate_events DEFAULT;
    CREATE TRIGGER lockgate_events_wake AFTER INSERT ON lockgate_events FOR EACH STATEMENT
        EXECUTE FUNCTION lockgate_wake('events');

    ALTER TABLE lockgate_deliveries RENAME TO lockgate_deliveries_p0;
    ALTER TABLE lockgate_deliveries_p0 DROP CONSTRAINT lockgate_deliveries_pkey;
    ALTER TABLE lockgate_deliveries_p0 DROP CONSTRAINT lockgate_deliveries_event_id_trigger_name_key;
    ALTER INDEX lockgate_deliveries_pending RENAME TO lockgate_deliveries_p0_pending;
    ALTER INDEX lockgate_deliveries_key RENAME TO lockgate_deliveries_p0_key;
    ALTER INDEX lockgate_deliveries_at RENAME TO lockgate_deliveries_p0_at;
    CREATE TABLE lockgate_deliveries (LIKE lockgate_deliveries_p0 INCLUDING DEFAULTS) PARTITION BY RANGE (created_at);
    ALTER TABLE lockgate_deliveries ADD CONSTRAINT lockgate_deliveries_pkey PRIMARY KEY (id, created_at);
    ALTER TABLE lockgate_deliveries ADD CONSTRAINT lockgate_deliveries_once
        UNIQUE (event_id, trigger_name, created_at);
    CREATE INDEX lockgate_deliveries_pending ON lockgate_deliveries (created_at) WHERE status = 'pending';
    CREATE INDEX lockgate_deliveries_key ON lockgate_deliveries (workflow, idempotency_key) WHERE status = 'started';
    CREATE INDEX lockgate_deliveries_at ON lockgate_deliveries (created_at);
    EXECUTE format('ALTER TABLE lockgate_deliveries ATTACH PARTITION lockgate_deliveries_p0 FOR VALUES FROM (MINVALUE) TO (%s)',
        bound);
    CREATE TABLE lockgate_deliveries_kept PARTITION OF lockgate_deliveries DEFAULT;

    PERFORM lockgate_timed_catch_up('lockgate_events');
    PERFORM lockgate_timed_catch_up('lockgate_deliveries');
END
$$;
