-- A run's own writes (its journal entries, its end) find it by id and check its owner, epoch and
-- status. A plan cached while the table was small may reach the row through any index those checks
-- touch; through (status) or (owner) alone it walked every running run, or every run of that worker,
-- so each write cost grew with the runs in flight. Neither index can do that any more:
-- the by-status index leaves running runs out (running runs are found through the runnable, owner
-- and workflow indexes; this one serves listing the ended and suspended runs, by far the most rows,
-- by status and age), and the by-owner index carries the run's id after its owner.
DROP INDEX lockgate_runs_status;
CREATE INDEX lockgate_runs_status ON lockgate_runs (status, created_at) WHERE status <> 'running';
DROP INDEX lockgate_runs_owner;
CREATE INDEX lockgate_runs_owner ON lockgate_runs (owner, id) WHERE owner IS NOT NULL;
