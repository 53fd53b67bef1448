-- Schedules and their firing ledger (store/schedules.py, sweeps/schedules.py). Kept in lockstep with
-- sql/postgres/schedules.sql.

-- name: schedule_register
-- A declared schedule: a new one starts its watermark now (no slot before it existed fires); a known
-- one takes the declaration as given and is no longer orphaned. A runtime schedule of the same name
-- passes to the code (its slots start over from now). The caller computed next_at from the watermark.
INSERT INTO lockgate_schedules (name, workflow, spec, timezone, watermark, next_at, created_at, updated_at)
VALUES (:name, :workflow, :spec, :timezone, :now, :next_at, :now, :now)
ON CONFLICT (name) DO UPDATE SET workflow = excluded.workflow, spec = excluded.spec,
    timezone = excluded.timezone, orphaned_at = NULL, updated_at = excluded.updated_at,
    watermark = CASE WHEN lockgate_schedules.origin = 'declared' THEN lockgate_schedules.watermark
        ELSE excluded.watermark END,
    next_at = CASE WHEN lockgate_schedules.paused = 1 THEN NULL ELSE excluded.next_at END,
    origin = 'declared', definition = NULL;

-- name: schedule_orphan
-- Schedules no longer declared by the code that ticks them: marked, never deleted.
UPDATE lockgate_schedules SET orphaned_at = :now, updated_at = :now, next_at = NULL
WHERE orphaned_at IS NULL AND origin = 'declared' AND name NOT IN (SELECT value FROM json_each(:names));

-- name: schedule_states
SELECT * FROM lockgate_schedules ORDER BY name;

-- name: schedule_state
SELECT * FROM lockgate_schedules WHERE name = :name;

-- name: schedule_lock
-- The schedule's row, held until the transaction ends where the store has concurrent writers:
-- overlap decisions for one schedule are taken one at a time.
SELECT * FROM lockgate_schedules WHERE name = :name;

-- name: schedule_advance
-- Move the watermark forward (never back), counting the slots the catch-up rule passed over, and set
-- when the sweep looks next. A sweep that read an older revision of a runtime schedule writes nothing.
UPDATE lockgate_schedules SET watermark = MAX(COALESCE(watermark, :watermark), :watermark),
    missed = missed + :missed, next_at = CASE WHEN paused = 1 THEN NULL ELSE :next_at END,
    updated_at = :now
WHERE name = :name AND revision = :revision;

-- name: schedule_pause
-- Pause or unpause. Unpausing moves the watermark to now: slots that fell in the pause are not caught up.
-- A paused schedule is not due; an unpaused one next at the instant the caller computed.
UPDATE lockgate_schedules SET paused = :paused, paused_reason = :reason, paused_at = :paused_at,
    watermark = CASE WHEN :paused = 0 THEN MAX(COALESCE(watermark, :now), :now) ELSE watermark END,
    next_at = CASE WHEN :paused = 0 AND orphaned_at IS NULL THEN :next_at ELSE NULL END,
    updated_at = :now
WHERE name = :name
RETURNING name;

-- name: firing_claim
-- The exactly-once claim: the unique (schedule, scheduled_at, manual) lets one claimant have the slot.
INSERT INTO lockgate_schedule_firings (schedule, scheduled_at, manual, cause, workflow, source, identity,
    idempotency_key, status, owner, lease_until, claimed_at)
VALUES (:schedule, :scheduled_at, :manual, :cause, :workflow, :source, :identity, :idempotency_key, 'claimed',
    :owner, :lease_until, :now)
ON CONFLICT (schedule, scheduled_at, manual) DO NOTHING
RETURNING *;

-- name: firings_live
-- A schedule's firings not finished yet (claimed, buffered, or started), oldest slot first, with the status
-- of their run: one that ended is not live any more, even before the sweep records its end.
SELECT f.*, r.status AS run_status FROM lockgate_schedule_firings f
LEFT JOIN lockgate_runs r ON r.identity = f.identity
WHERE f.schedule = :schedule AND f.status IN ('claimed', 'buffered', 'started')
ORDER BY f.scheduled_at, f.id;

-- name: firings_open
-- Every firing claimed or started, and of each schedule's buffered ones the oldest (the next to start: a
-- backlog's others wait behind it and are not read each tick), with its run as far as one exists (found by
-- the identity it claimed).
SELECT f.*, r.id AS found_run, r.status AS run_status, r.error_message AS run_error,
    r.finished_at AS run_finished_at
FROM lockgate_schedule_firings f LEFT JOIN lockgate_runs r ON r.identity = f.identity
WHERE f.status IN ('claimed', 'started') OR (f.status = 'buffered' AND NOT EXISTS (
    SELECT 1 FROM lockgate_schedule_firings o
    WHERE o.schedule = f.schedule AND o.status = 'buffered'
      AND (o.scheduled_at < f.scheduled_at OR (o.scheduled_at = f.scheduled_at AND o.id < f.id))))
ORDER BY f.schedule, f.scheduled_at, f.id;

-- name: firing_update
-- A firing moves on from the status it is expected in (a firing someone else moved is left alone).
-- A move that records a start (a ticket) waits for that start to be in this database: after a failover that
-- lost its commit (asynchronous replication) a move retried on the promoted server would otherwise name a
-- run that never existed there, and the schedule would wait on it for good. Left as it was, the firing is
-- started again (a claim once its lease lapses, a buffered firing at the next tick).
UPDATE lockgate_schedule_firings SET status = :status, why = COALESCE(:why, why),
    run_id = COALESCE(:run_id, run_id), ticket = COALESCE(:ticket, ticket),
    start_status = COALESCE(:start_status, start_status), started_at = COALESCE(:started_at, started_at),
    finished_at = COALESCE(:finished_at, finished_at)
WHERE id = :id AND status = :expect
    AND (:ticket IS NULL OR EXISTS (SELECT 1 FROM lockgate_ledger WHERE ticket = :ticket))
RETURNING id;

-- name: firing_take
-- A claim whose claimant went away before starting it: another takes it (its start is idempotent).
UPDATE lockgate_schedule_firings SET owner = :owner, lease_until = :lease_until
WHERE id = :id AND status = 'claimed' AND lease_until < :now
RETURNING *;

-- name: firings_of
SELECT * FROM lockgate_schedule_firings WHERE schedule = :schedule ORDER BY id DESC LIMIT :limit;

-- name: firings_at
-- The firings of a schedule's slots in a range (what a backfill would find already fired).
SELECT * FROM lockgate_schedule_firings
WHERE schedule = :schedule AND manual = 0 AND scheduled_at >= :start AND scheduled_at <= :end
ORDER BY scheduled_at;

-- name: firing_counts
SELECT schedule, status, COUNT(*) AS n, MAX(scheduled_at) AS last_at
FROM lockgate_schedule_firings GROUP BY schedule, status;

-- name: firing_counts_of
-- firing_counts for the named schedules only (a page of them): read through the firings' schedule index.
SELECT schedule, status, COUNT(*) AS n, MAX(scheduled_at) AS last_at
FROM lockgate_schedule_firings WHERE schedule IN (SELECT value FROM json_each(:names)) GROUP BY schedule, status;

-- name: firings_forget
-- Finished firings claimed before the engine's retention cutoff (their runs are forgotten then too); where the
-- firings are partitioned, only of slots before their oldest partition of one interval (the others go with it).
DELETE FROM lockgate_schedule_firings WHERE id IN (
    SELECT id FROM lockgate_schedule_firings
    WHERE claimed_at < :cutoff AND status IN ('skipped', 'succeeded', 'failed', 'cancelled')
      AND scheduled_at < :before
    LIMIT :limit
)
RETURNING id;

-- name: schedules_due
-- The schedules the sweep looks at now, by the index on next_at: its work is the rows due, not all rows.
SELECT * FROM lockgate_schedules WHERE next_at <= :now ORDER BY next_at LIMIT :limit;

-- name: schedules_named
SELECT * FROM lockgate_schedules WHERE name IN (SELECT value FROM json_each(:names));

-- name: schedule_create
-- A runtime schedule: one row, its options as JSON, due at next_at.
INSERT INTO lockgate_schedules (name, workflow, spec, timezone, paused, paused_at, watermark, next_at, origin,
    definition, revision, created_at, updated_at)
VALUES (:name, :workflow, :spec, :timezone, :paused, :paused_at, :watermark, :next_at, 'runtime',
    :definition, 1, :now, :now)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: schedule_replace
-- New options for a runtime schedule, if nobody changed it since the caller read revision.
UPDATE lockgate_schedules SET workflow = :workflow, spec = :spec, timezone = :timezone,
    definition = :definition, watermark = :watermark,
    next_at = CASE WHEN paused = 1 THEN NULL ELSE :next_at END,
    revision = revision + 1, updated_at = :now
WHERE name = :name AND origin = 'runtime' AND revision = :revision
RETURNING name;

-- name: schedule_delete
DELETE FROM lockgate_schedules WHERE name = :name AND origin = 'runtime' RETURNING name;

-- name: firings_drop_waiting
-- A deleted schedule's firings that never started: buffered ones, and claims their claimant left.
UPDATE lockgate_schedule_firings SET status = 'skipped', why = :why, finished_at = :now
WHERE schedule = :schedule AND (status = 'buffered' OR (status = 'claimed' AND lease_until < :now))
RETURNING id;

-- name: schedules_page
-- A page of schedules by id, from after the cursor, optionally of one workflow, origin or pause state.
SELECT * FROM lockgate_schedules
WHERE name > :cursor AND (:workflow IS NULL OR workflow = :workflow)
    AND (:prefix IS NULL OR substr(name, 1, :prefix_len) = :prefix)
    AND (:paused IS NULL OR paused = :paused)
ORDER BY name LIMIT :limit;

-- name: schedules_behind
-- Schedules the sweep should have looked at before cutoff: how many, and the oldest instant among them.
SELECT COUNT(*) AS n, MIN(next_at) AS oldest FROM lockgate_schedules WHERE next_at < :cutoff;

-- name: schedules_lock_many
-- The rows of the schedules one sweep batch fires (one writer here: nothing else holds them).
SELECT * FROM lockgate_schedules WHERE name IN (SELECT value FROM json_each(:names)) ORDER BY name;

-- name: firings_live_of
-- What the overlap policies of many schedules need (through the partial index of the live firings): each
-- claimed or started firing with its run's status, and per schedule how many are buffered (n; one row).
SELECT f.schedule, f.id, f.status, f.run_id, r.status AS run_status, 1 AS n FROM lockgate_schedule_firings f
LEFT JOIN lockgate_runs r ON r.identity = f.identity
WHERE f.schedule IN (SELECT value FROM json_each(:names)) AND f.status IN ('claimed', 'started')
UNION ALL
SELECT schedule, MIN(id), 'buffered', NULL, NULL, COUNT(*) FROM lockgate_schedule_firings
WHERE schedule IN (SELECT value FROM json_each(:names)) AND status = 'buffered'
GROUP BY schedule;

-- name: firings_update_many
-- firing_update for many firings (a JSON array of moves, ids distinct; times as text, which CAST reads
-- exactly). Here a statement is a function call: store/schedules.move_firings runs firing_update per
-- move (Tx.rows_in_one), and this form stays beside PostgreSQL's, tested.
UPDATE lockgate_schedule_firings AS f SET status = m.value ->> 'status', why = COALESCE(m.value ->> 'why', f.why),
    run_id = COALESCE(m.value ->> 'run_id', f.run_id), ticket = COALESCE(m.value ->> 'ticket', f.ticket),
    start_status = COALESCE(m.value ->> 'start_status', f.start_status),
    started_at = COALESCE(CAST(m.value ->> 'started_at' AS REAL), f.started_at),
    finished_at = COALESCE(CAST(m.value ->> 'finished_at' AS REAL), f.finished_at)
FROM json_each(:moves) AS m
WHERE f.id = m.value ->> 'id' AND f.status = m.value ->> 'expect'
    AND (m.value ->> 'ticket' IS NULL
        OR EXISTS (SELECT 1 FROM lockgate_ledger l WHERE l.ticket = m.value ->> 'ticket'))
RETURNING id;  -- the updated table's own id (RETURNING names no other table here)

-- name: schedules_advance_many
-- silent: run for its effect; nothing waits for its answer
-- schedule_advance for many schedules (a JSON array, names distinct); per schedule here, as above.
UPDATE lockgate_schedules AS s SET
    watermark = MAX(COALESCE(s.watermark, CAST(a.value ->> 'watermark' AS REAL)), CAST(a.value ->> 'watermark' AS REAL)),
    missed = s.missed + a.value ->> 'missed',
    next_at = CASE WHEN s.paused = 1 THEN NULL ELSE CAST(a.value ->> 'next_at' AS REAL) END,
    updated_at = :now
FROM json_each(:rows) AS a
WHERE s.name = a.value ->> 'name' AND s.revision = a.value ->> 'revision';

-- name: firings_take_buffered
-- The oldest buffered firing of each named schedule (through the partial index of the live firings) becomes
-- a claim of the caller's, leased: a run of the schedule ended and nothing of it runs (engine/schedule_chain.py).
-- A head someone else moved meanwhile is left alone; a claim left unstarted is taken over as any other.
-- The index's own IN term is repeated: SQLite uses a partial index only for a query that states its condition.
UPDATE lockgate_schedule_firings SET status = 'claimed', owner = :owner, lease_until = :lease_until
WHERE status = 'buffered' AND id IN (
    SELECT (SELECT f.id FROM lockgate_schedule_firings f
            WHERE f.schedule = n.value AND f.status = 'buffered' AND f.status IN ('claimed', 'buffered', 'started')
            ORDER BY f.scheduled_at, f.id LIMIT 1)
    FROM json_each(:names) AS n)
RETURNING *;
