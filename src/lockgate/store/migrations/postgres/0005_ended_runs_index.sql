-- The by-status index now leaves running runs out. A run's own writes (its journal entry, its end) find
-- it by id and check that it is running; with running runs in this index, a plan made while the table
-- was small could walk every running run instead, so each write cost grew with the runs in flight.
-- Running runs are found through the runnable, owner and workflow indexes; this one serves listing the
-- ended and suspended runs, by far the most rows, by status and age.
DROP INDEX lockgate_runs_status;
CREATE INDEX lockgate_runs_status ON lockgate_runs (status, created_at) WHERE status <> 'running';
