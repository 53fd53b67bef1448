-- Schedules created at runtime beside those declared in code: one row per schedule either way, and
-- the sweep finds the due ones through an index on the next instant to look at, never by reading
-- them all. Table for table the same as migrations/postgres/0027_runtime_schedules.sql.
-- declared (its code owns it) | runtime (the calls that made it own it).
ALTER TABLE lockgate_schedules ADD COLUMN origin TEXT NOT NULL DEFAULT 'declared';
-- A runtime schedule's options as JSON (a declared one's live in its code).
ALTER TABLE lockgate_schedules ADD COLUMN definition TEXT;
-- When the sweep next looks at the schedule: never after its next slot (plus jitter); NULL while it is
-- paused, orphaned or past its end. Rows of an older version are looked at once, at the next tick.
ALTER TABLE lockgate_schedules ADD COLUMN next_at REAL;
-- Bumped by each change of a runtime schedule's options: a sweep holding older options writes nothing.
ALTER TABLE lockgate_schedules ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
UPDATE lockgate_schedules SET next_at = COALESCE(watermark, created_at) WHERE paused = 0 AND orphaned_at IS NULL;
CREATE INDEX lockgate_schedules_due ON lockgate_schedules (next_at) WHERE next_at IS NOT NULL;
CREATE INDEX lockgate_schedules_workflow ON lockgate_schedules (workflow, name);
