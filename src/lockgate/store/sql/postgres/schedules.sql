-- Schedules and their firing ledger (store/schedules.py, sweeps/schedules.py). Kept in lockstep with
-- sql/sqlite/schedules.sql.

-- name: schedule_register
-- A declared schedule: a new one starts its watermark now (no slot before it existed fires); a known
-- one takes the declaration as given and is no longer orphaned. A runtime schedule of the same name
-- passes to the code (its slots start over from now). The caller computed next_at from the watermark.
INSERT INTO lockgate_schedules (name, workflow, spec, timezone, watermark, next_at, created_at, updated_at)
VALUES (%(name)s, %(workflow)s, %(spec)s, %(timezone)s, %(now)s, %(next_at)s, %(now)s, %(now)s)
ON CONFLICT (name) DO UPDATE SET workflow = excluded.workflow, spec = excluded.spec,
    timezone = excluded.timezone, orphaned_at = NULL, updated_at = excluded.updated_at,
    watermark = CASE WHEN lockgate_schedules.origin = 'declared' THEN lockgate_schedules.watermark
        ELSE excluded.watermark END,
    next_at = CASE WHEN lockgate_schedules.paused = 1 THEN NULL ELSE excluded.next_at END,
    origin = 'declared', definition = NULL;

-- name: schedule_orphan
-- Schedules no longer declared by the code that ticks them: marked, never deleted.
UPDATE lockgate_schedules SET orphaned_at = %(now)s, updated_at = %(now)s, next_at = NULL
WHERE orphaned_at IS NULL AND origin = 'declared' AND name NOT IN (SELECT jsonb_array_elements_text(%(names)s::jsonb));

-- name: schedule_states
SELECT * FROM lockgate_schedules ORDER BY name;

-- name: schedule_state
SELECT * FROM lockgate_schedules WHERE name = %(name)s;

-- name: schedule_lock
-- The schedule's row, held until the transaction ends where the store has concurrent writers:
-- overlap decisions for one schedule are taken one at a time.
SELECT * FROM lockgate_schedules WHERE name = %(name)s FOR UPDATE;

-- name: schedule_advance
-- Move the watermark forward (never back), counting the slots the catch-up rule passed over, and set
-- when the sweep looks next. A sweep that read an older revision of a runtime schedule writes nothing.
UPDATE lockgate_schedules SET watermark = GREATEST(COALESCE(watermark, %(watermark)s::double precision), %(watermark)s::double precision),
    missed = missed + %(missed)s, next_at = CASE WHEN paused = 1 THEN NULL ELSE %(next_at)s::double precision END,
    updated_at = %(now)s
WHERE name = %(name)s AND revision = %(revision)s;

-- name: schedule_pause
-- Pause or unpause. Unpausing moves the watermark to now: slots that fell in the pause are not caught up.
-- A paused schedule is not due; an unpaused one next at the instant the caller computed.
UPDATE lockgate_schedules SET paused = %(paused)s, paused_reason = %(reason)s, paused_at = %(paused_at)s,
    watermark = CASE WHEN %(paused)s::integer = 0
        THEN GREATEST(COALESCE(watermark, %(now)s::double precision), %(now)s::double precision)
        ELSE watermark END,
    next_at = CASE WHEN %(paused)s::integer = 0 AND orphaned_at IS NULL
        THEN %(next_at)s::double precision ELSE NULL END,
    updated_at = %(now)s
WHERE name = %(name)s
RETURNING name;

-- name: firing_claim
-- The exactly-once claim: the unique (schedule, scheduled_at, manual) lets one claimant have the slot.
INSERT INTO lockgate_schedule_firings (schedule, scheduled_at, manual, cause, workflow, source, identity,
    idempotency_key, status, owner, lease_until, claimed_at)
VALUES (%(schedule)s, %(scheduled_at)s, %(manual)s, %(cause)s, %(workflow)s, %(source)s, %(identity)s,
    %(idempotency_key)s, 'claimed',
    %(owner)s, %(lease_until)s, %(now)s)
ON CONFLICT (schedule, scheduled_at, manual) DO NOTHING
RETURNING *;

-- name: firings_live
-- A schedule's firings not finished yet (claimed, buffered, or started), oldest slot first, with the status
-- of their run: one that ended is not live any more, even before the sweep records its end.
SELECT f.*, r.status AS run_status FROM lockgate_schedule_firings f
LEFT JOIN lockgate_runs r ON r.identity = f.identity
WHERE f.schedule = %(schedule)s AND f.status IN ('claimed', 'buffered', 'started')
ORDER BY f.scheduled_at, f.id;

-- name: firings_open
-- Every firing claimed or started, and of each schedule's buffered ones the oldest (the next to start: a
-- backlog's others wait behind it and are not read each tick), with its run as far as one exists (found by
-- the identity it claimed).
SELECT f.*, r.id AS found_run, r.status AS run_status, r.error_message AS run_error,
    r.finished_at AS run_finished_at
FROM (
    SELECT * FROM lockgate_schedule_firings WHERE status IN ('claimed', 'started')
    UNION ALL
    (SELECT DISTINCT ON (schedule) * FROM lockgate_schedule_firings WHERE status = 'buffered'
     ORDER BY schedule, scheduled_at, id)
) f LEFT JOIN lockgate_runs r ON r.identity = f.identity
ORDER BY f.schedule, f.scheduled_at, f.id;

-- name: firing_update
-- A firing moves on from the status it is expected in (a firing someone else moved is left alone).
-- A move that records a start (a ticket) waits for that start to be in this database: after a failover that
-- lost its commit (asynchronous replication) a move retried on the promoted server would otherwise name a
-- run that never existed there, and the schedule would wait on it for good. Left as it was, the firing is
-- started again (a claim once its lease lapses, a buffered firing at the next tick).
UPDATE lockgate_schedule_firings SET status = %(status)s, why = COALESCE(%(why)s, why),
    run_id = COALESCE(%(run_id)s, run_id), ticket = COALESCE(%(ticket)s, ticket),
    start_status = COALESCE(%(start_status)s, start_status), started_at = COALESCE(%(started_at)s, started_at),
    finished_at = COALESCE(%(finished_at)s, finished_at)
WHERE id = %(id)s AND status = %(expect)s
    AND (%(ticket)s::text IS NULL OR EXISTS (SELECT 1 FROM lockgate_ledger WHERE ticket = %(ticket)s))
RETURNING id;

-- name: firing_take
-- A claim whose claimant went away before starting it: another takes it (its start is idempotent).
UPDATE lockgate_schedule_firings SET owner = %(owner)s, lease_until = %(lease_until)s
WHERE id = %(id)s AND status = 'claimed' AND lease_until < %(now)s
RETURNING *;

-- name: firings_of
SELECT * FROM lockgate_schedule_firings WHERE schedule = %(schedule)s ORDER BY id DESC LIMIT %(limit)s;

-- name: firings_at
-- The firings of a schedule's slots in a range (what a backfill would find already fired).
SELECT * FROM lockgate_schedule_firings
WHERE schedule = %(schedule)s AND manual = 0 AND scheduled_at >= %(start)s AND scheduled_at <= %(end)s
ORDER BY scheduled_at;

-- name: firing_counts
SELECT schedule, status, COUNT(*) AS n, MAX(scheduled_at) AS last_at
FROM lockgate_schedule_firings GROUP BY schedule, status;

-- name: firing_counts_of
-- firing_counts for the named schedules only (a page of them): read through the firings' schedule index.
SELECT schedule, status, COUNT(*) AS n, MAX(scheduled_at) AS last_at
FROM lockgate_schedule_firings WHERE schedule = ANY (ARRAY(SELECT jsonb_array_elements_text(%(names)s::jsonb))) GROUP BY schedule, status;

-- name: firings_forget
-- Finished firings claimed before the engine's retention cutoff (their runs are forgotten then too); where the
-- firings are partitioned, only of slots before their oldest partition of one interval (the others go with it).
DELETE FROM lockgate_schedule_firings WHERE scheduled_at < %(before)s AND id = ANY (ARRAY(
    SELECT id FROM lockgate_schedule_firings
    WHERE claimed_at < %(cutoff)s AND status IN ('skipped', 'succeeded', 'failed', 'cancelled')
      AND scheduled_at < %(before)s
    LIMIT %(limit)s
))
RETURNING id;

-- name: schedules_due
-- The schedules the sweep looks at now, by the index on next_at: its work is the rows due, not all rows.
SELECT * FROM lockgate_schedules WHERE next_at <= %(now)s ORDER BY next_at LIMIT %(limit)s;

-- name: schedules_named
SELECT * FROM lockgate_schedules WHERE name IN (SELECT jsonb_array_elements_text(%(names)s::jsonb));

-- name: schedule_create
-- A runtime schedule: one row, its options as JSON, due at next_at.
INSERT INTO lockgate_schedules (name, workflow, spec, timezone, paused, paused_at, watermark, next_at, origin,
    definition, revision, created_at, updated_at)
VALUES (%(name)s, %(workflow)s, %(spec)s, %(timezone)s, %(paused)s, %(paused_at)s, %(watermark)s, %(next_at)s, 'runtime',
    %(definition)s, 1, %(now)s, %(now)s)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: schedule_replace
-- New options for a runtime schedule, if nobody changed it since the caller read revision.
UPDATE lockgate_schedules SET workflow = %(workflow)s, spec = %(spec)s, timezone = %(timezone)s,
    definition = %(definition)s, watermark = %(watermark)s,
    next_at = CASE WHEN paused = 1 THEN NULL ELSE %(next_at)s::double precision END,
    revision = revision + 1, updated_at = %(now)s
WHERE name = %(name)s AND origin = 'runtime' AND revision = %(revision)s
RETURNING name;

-- name: schedule_delete
DELETE FROM lockgate_schedules WHERE name = %(name)s AND origin = 'runtime' RETURNING name;

-- name: firings_drop_waiting
-- A deleted schedule's firings that never started: buffered ones, and claims their claimant left.
UPDATE lockgate_schedule_firings SET status = 'skipped', why = %(why)s, finished_at = %(now)s
WHERE schedule = %(schedule)s AND (status = 'buffered' OR (status = 'claimed' AND lease_until < %(now)s))
RETURNING id;

-- name: schedules_page
-- A page of schedules by id, from after the cursor, optionally of one workflow, origin or pause state.
SELECT * FROM lockgate_schedules
WHERE name > %(cursor)s AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s)
    AND (%(prefix)s::text IS NULL OR substr(name, 1, %(prefix_len)s) = %(prefix)s)
    AND (%(paused)s::integer IS NULL OR paused = %(paused)s)
ORDER BY name LIMIT %(limit)s;

-- name: schedules_behind
-- Schedules the sweep should have looked at before cutoff: how many, and the oldest instant among them.
SELECT COUNT(*) AS n, MIN(next_at) AS oldest FROM lockgate_schedules WHERE next_at < %(cutoff)s;

-- name: schedules_lock_many
-- The rows of the schedules one sweep batch fires, locked: each one's overlap decisions are taken one
-- batch at a time. A row another transaction holds is left out, not waited for (a replica ticking at the
-- same time fires it, or a verb changes it and the next tick sees it): two replicas' batches split the
-- rows between them instead of queueing behind each other, and never wait on each other in a circle.
SELECT * FROM lockgate_schedules
WHERE name = ANY (ARRAY(SELECT jsonb_array_elements_text(%(names)s::jsonb)))
ORDER BY name FOR UPDATE SKIP LOCKED;

-- name: firings_live_of
-- What the overlap policies of many schedules need (through the partial index of the live firings): each
-- claimed or started firing with its run's status, and per schedule how many are buffered (n; one row).
SELECT f.schedule, f.id, f.status, f.run_id, r.status AS run_status, 1 AS n FROM lockgate_schedule_firings f
LEFT JOIN lockgate_runs r ON r.identity = f.identity
WHERE f.schedule = ANY (ARRAY(SELECT jsonb_array_elements_text(%(names)s::jsonb)))
    AND f.status IN ('claimed', 'started')
UNION ALL
SELECT schedule, MIN(id), 'buffered', NULL, NULL, COUNT(*) FROM lockgate_schedule_firings
WHERE schedule = ANY (ARRAY(SELECT jsonb_array_elements_text(%(names)s::jsonb))) AND status = 'buffered'
GROUP BY schedule;

-- name: firings_update_many
-- firing_update for many firings (a JSON array of moves, ids distinct), each found by its id; the ids moved.
UPDATE lockgate_schedule_firings f SET status = m.status, why = COALESCE(m.why, f.why),
    run_id = COALESCE(m.run_id, f.run_id), ticket = COALESCE(m.ticket, f.ticket),
    start_status = COALESCE(m.start_status, f.start_status), started_at = COALESCE(m.started_at, f.started_at),
    finished_at = COALESCE(m.finished_at, f.finished_at)
FROM jsonb_to_recordset(%(moves)s::jsonb) AS m(id bigint, expect text, status text, why text, run_id text,
    ticket text, start_status text, started_at float8, finished_at float8)
WHERE f.id = m.id AND f.status = m.expect
    AND (m.ticket IS NULL OR EXISTS (SELECT 1 FROM lockgate_ledger l WHERE l.ticket = m.ticket))
RETURNING f.id;

-- name: schedules_advance_many
-- silent: run for its effect; nothing waits for its answer
-- schedule_advance for many schedules (a JSON array, names distinct), each found by its name.
UPDATE lockgate_schedules s SET watermark = GREATEST(COALESCE(s.watermark, a.watermark), a.watermark),
    missed = s.missed + a.missed, next_at = CASE WHEN s.paused = 1 THEN NULL ELSE a.next_at END,
    updated_at = %(now)s
FROM jsonb_to_recordset(%(rows)s::jsonb) AS a(name text, watermark float8, missed integer, next_at float8,
    revision integer)
WHERE s.name = a.name AND s.revision = a.revision;

-- name: firings_take_buffered
-- The oldest buffered firing of each named schedule (through the partial index of the live firings) becomes
-- a claim of the caller's, leased: a run of the schedule ended and nothing of it runs (engine/schedule_chain.py).
-- A head someone else moved meanwhile is left alone; a claim left unstarted is taken over as any other.
-- Each head is updated by its key, (id, scheduled_at): one probe of the partition it is in.
UPDATE lockgate_schedule_firings SET status = 'claimed', owner = %(owner)s, lease_until = %(lease_until)s
WHERE status = 'buffered' AND (id, scheduled_at) IN (
    SELECT h.id, h.scheduled_at FROM jsonb_array_elements_text(%(names)s::jsonb) AS n(name)
    CROSS JOIN LATERAL (SELECT f.id, f.scheduled_at FROM lockgate_schedule_firings f
                        WHERE f.schedule = n.name AND f.status = 'buffered'
                        ORDER BY f.scheduled_at, f.id LIMIT 1) h)
RETURNING *;
