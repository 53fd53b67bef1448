-- PostgreSQL partitions its domain events and deliveries by time here (docs/history.md); SQLite keeps its
-- tables as they are. lockgate_event_ids is made for the same schema on both: there the ids publishers give are
-- kept apart from the partitioned events; here the events' own key holds every id, and it stays empty.
CREATE TABLE lockgate_event_ids (
    id          TEXT PRIMARY KEY,
    occurred_at REAL NOT NULL
);
CREATE INDEX lockgate_event_ids_at ON lockgate_event_ids (occurred_at);
