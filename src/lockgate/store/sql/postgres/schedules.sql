-- Schedules and their firing ledger (store/schedules.py, sweeps/schedules.py). Kept in lockstep with
-- sql/sqlite/schedules.sql.

-- name: schedule_register
-- A declared schedule: a new one starts its watermark now (no slot before it existed fires); a known
-- one takes the declaration as given and is no longer orphaned.
INSERT INTO lockgate_schedules (name, workflow, spec, timezone, watermark, created_at, updated_at)
VALUES (%(name)s, %(workflow)s, %(spec)s, %(timezone)s, %(now)s, %(now)s, %(now)s)
ON CONFLICT (name) DO UPDATE SET workflow = excluded.workflow, spec = excluded.spec,
    timezone = excluded.timezone, orphaned_at = NULL, updated_at = excluded.updated_at;

-- name: schedule_orphan
-- Schedules no longer declared by the code that ticks them: marked, never deleted.
UPDATE lockgate_schedules SET orphaned_at = %(now)s, updated_at = %(now)s
WHERE orphaned_at IS NULL AND name NOT IN (SELECT jsonb_array_elements_text(%(names)s::jsonb));

-- name: schedule_states
SELECT * FROM lockgate_schedules ORDER BY name;

-- name: schedule_state
SELECT * FROM lockgate_schedules WHERE name = %(name)s;

-- name: schedule_lock
-- The schedule's row, held until the transaction ends where the store has concurrent writers:
-- overlap decisions for one schedule are taken one at a time.
SELECT * FROM lockgate_schedules WHERE name = %(name)s FOR UPDATE;

-- name: schedule_advance
-- Move the watermark forward (never back), counting the slots the catch-up rule passed over.
UPDATE lockgate_schedules SET watermark = %(watermark)s, missed = missed + %(missed)s, updated_at = %(now)s
WHERE name = %(name)s AND (watermark IS NULL OR watermark < %(watermark)s);

-- name: schedule_pause
-- Pause or unpause. Unpausing moves the watermark to now: slots that fell in the pause are not caught up.
UPDATE lockgate_schedules SET paused = %(paused)s, paused_reason = %(reason)s, paused_at = %(paused_at)s,
    watermark = CASE WHEN %(paused)s::integer = 0
        THEN GREATEST(COALESCE(watermark, %(now)s::double precision), %(now)s::double precision)
        ELSE watermark END,
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
-- Every firing not finished yet, with its run as far as one exists (found by the identity it claimed).
SELECT f.*, r.id AS found_run, r.status AS run_status, r.error_message AS run_error,
    r.finished_at AS run_finished_at
FROM lockgate_schedule_firings f LEFT JOIN lockgate_runs r ON r.identity = f.identity
WHERE f.status IN ('claimed', 'buffered', 'started')
ORDER BY f.schedule, f.scheduled_at, f.id;

-- name: firing_update
-- A firing moves on from the status it is expected in (a firing someone else moved is left alone).
UPDATE lockgate_schedule_firings SET status = %(status)s, why = COALESCE(%(why)s, why),
    run_id = COALESCE(%(run_id)s, run_id), ticket = COALESCE(%(ticket)s, ticket),
    start_status = COALESCE(%(start_status)s, start_status), started_at = COALESCE(%(started_at)s, started_at),
    finished_at = COALESCE(%(finished_at)s, finished_at)
WHERE id = %(id)s AND status = %(expect)s
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

-- name: firings_forget
-- Finished firings claimed before the engine's retention cutoff (their runs are forgotten then too).
DELETE FROM lockgate_schedule_firings WHERE id IN (
    SELECT id FROM lockgate_schedule_firings
    WHERE claimed_at < %(cutoff)s AND status IN ('skipped', 'succeeded', 'failed', 'cancelled')
    LIMIT %(limit)s
)
RETURNING id;
