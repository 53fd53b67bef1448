-- A compensating cancel marks its run's row as well as its journal: a park that waited for the cancel's
-- lock on the row reads the mark in the row it updates, where its look at the journal, made before the
-- wait, did not see the cancel's entry (runs.sql: park_run). Runs cancelled before this keep the entry.
ALTER TABLE lockgate_runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
