-- name: pending_by_identity
SELECT id, ticket FROM lockgate_pending WHERE identity = %(identity)s LIMIT 1;

-- name: run_id_by_identity
SELECT id FROM lockgate_runs WHERE identity = %(identity)s;

-- name: pause_of
SELECT scope, reason, until FROM lockgate_pauses
WHERE scope = %(scope)s AND (until IS NULL OR until > %(now)s);

-- name: key_pauses
SELECT scope, reason, until FROM lockgate_pauses
WHERE scope IN (SELECT jsonb_array_elements_text(%(scopes)s::jsonb)) AND (until IS NULL OR until > %(now)s)
ORDER BY until DESC;

-- name: upsert_pause
INSERT INTO lockgate_pauses (scope, reason, until, created_at) VALUES (%(scope)s, %(reason)s, %(until)s, %(now)s)
ON CONFLICT (scope) DO UPDATE SET reason = excluded.reason, until = excluded.until, created_at = excluded.created_at;

-- name: delete_pause
DELETE FROM lockgate_pauses WHERE scope = %(scope)s RETURNING scope;

-- name: list_pauses
SELECT * FROM lockgate_pauses WHERE until IS NULL OR until > %(now)s ORDER BY scope;

-- name: window_nth
-- The limit-th most recent hit inside the window (none while it has room): one lookup by rank.
SELECT at FROM lockgate_window_hits
WHERE scope = %(scope)s AND key = %(key)s AND at > %(since)s
    AND n = (SELECT MAX(n) FROM lockgate_window_hits WHERE scope = %(scope)s AND key = %(key)s) - %(back)s;

-- name: window_queues
-- For each [scope, key, limit] of the JSON list %(windows)s: its newest `limit` hits by rank (n, at), and a
-- row with n NULL when a start waits there for the window (waiting_ahead with mode 'throttle').
SELECT w.value ->> 0 AS scope, w.value ->> 1 AS key, h.n, h.at
FROM json_array_elements(%(windows)s::json) AS w(value)
JOIN lockgate_window_hits h ON h.scope = w.value ->> 0 AND h.key = w.value ->> 1
WHERE h.n > (SELECT MAX(m.n) FROM lockgate_window_hits m WHERE m.scope = h.scope AND m.key = h.key)
    - (w.value ->> 2)::bigint
UNION ALL
SELECT w.value ->> 0, w.value ->> 1, NULL, NULL
FROM json_array_elements(%(windows)s::json) AS w(value)
WHERE (SELECT 1 FROM lockgate_pending p  -- the head of the line: one index probe (see slot_queues)
       WHERE p.mode = 'throttle' AND p.hold_scope = w.value ->> 0 AND p.hold_key = w.value ->> 1
       ORDER BY p.priority DESC, p.seq LIMIT 1) IS NOT NULL;

-- name: add_window_hit
-- Ranked after the key's newest hit (decisions on one key are serialised: one writer, or the key's lock).
INSERT INTO lockgate_window_hits (scope, key, at, n)
SELECT %(scope)s, %(key)s, %(at)s, COALESCE(MAX(n), 0) + 1
FROM lockgate_window_hits WHERE scope = %(scope)s AND key = %(key)s;

-- name: prune_window
DELETE FROM lockgate_window_hits WHERE scope = %(scope)s AND key = %(key)s AND at <= %(before)s;

-- name: lock_key
-- Held until the transaction ends: deciders in other processes queue on the same (scope, key).
-- silent: the lock is taken when the server runs it, before anything sent after it; its row is never read.
SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended(%(lock)s, 0))) AS held;

-- name: open_group
SELECT * FROM lockgate_pending WHERE group_key = %(group_key)s;

-- name: open_groups
-- open_group for each group key of the JSON list %(group_keys)s: one query for any number.
SELECT * FROM lockgate_pending WHERE group_key IN (SELECT json_array_elements_text(%(group_keys)s::json));

-- name: refold_pending
-- fold_pending many times over, as one write of where the folds left the row.
UPDATE lockgate_pending
SET payload = %(payload)s, items = %(items)s, identity = %(identity)s, idempotency_key = %(idempotency_key)s,
    folded = %(folded)s, last_at = %(last_at)s, due_at = %(due_at)s, keys = %(keys)s, priority = %(priority)s,
    fair_key = %(fair_key)s
WHERE id = %(id)s;

-- name: insert_pending
INSERT INTO lockgate_pending (id, workflow, ticket, mode, stage, hold_scope, hold_key, group_key, singleton_key,
    payload, items, keys, identity, idempotency_key, folded, priority, fair_key, on_failure, retry_of, source, trace_id, subject, seq,
    first_at, last_at, due_at, expires_at)
VALUES (%(id)s, %(workflow)s, %(ticket)s, %(mode)s, %(stage)s, %(hold_scope)s, %(hold_key)s, %(group_key)s, %(singleton_key)s,
    %(payload)s, %(items)s, %(keys)s, %(identity)s, %(idempotency_key)s, %(folded)s, %(priority)s, %(fair_key)s, %(on_failure)s,
    %(retry_of)s, %(source)s, %(trace_id)s, %(subject)s, %(seq)s,
    %(first_at)s, %(last_at)s, %(due_at)s, %(expires_at)s);

-- name: fold_pending
UPDATE lockgate_pending
SET payload = %(payload)s, items = %(items)s, identity = %(identity)s, idempotency_key = %(idempotency_key)s,
    folded = folded + 1, last_at = %(now)s, due_at = %(due_at)s, keys = %(keys)s, priority = %(priority)s, fair_key = %(fair_key)s
WHERE id = %(id)s;

-- name: repark_pending
UPDATE lockgate_pending
SET mode = %(mode)s, stage = %(stage)s, hold_scope = %(hold_scope)s, hold_key = %(hold_key)s, group_key = %(group_key)s,
    payload = %(payload)s, items = %(items)s, keys = %(keys)s, identity = %(identity)s, idempotency_key = %(idempotency_key)s,
    due_at = %(due_at)s
WHERE id = %(id)s;

-- name: delete_pending
DELETE FROM lockgate_pending WHERE id = %(id)s RETURNING id;

-- name: get_pending
SELECT * FROM lockgate_pending WHERE id = %(id)s;

-- name: waiting_ahead
-- The head of the line: one index probe (see slot_queues).
SELECT 1 AS ahead FROM lockgate_pending
WHERE mode = %(mode)s AND hold_scope = %(scope)s AND hold_key = %(key)s ORDER BY priority DESC, seq LIMIT 1;

-- name: singleton_incumbent
SELECT id FROM lockgate_runs
WHERE singleton_key = %(singleton_key)s AND status IN ('running', 'suspended')
ORDER BY created_at LIMIT 1;

-- name: singleton_pending
SELECT id, ticket FROM lockgate_pending WHERE singleton_key = %(singleton_key)s AND id <> %(exclude)s LIMIT 1;

-- name: singleton_incumbents
SELECT id FROM lockgate_runs WHERE singleton_key = %(singleton_key)s AND status IN ('running', 'suspended');

-- name: slots_in_use
SELECT COUNT(*) AS n FROM lockgate_slots WHERE scope = %(scope)s AND key = %(key)s;

-- name: slots_in_scope
SELECT COUNT(*) AS n FROM lockgate_slots WHERE scope = %(scope)s;

-- name: slot_queues
-- For each [scope, key] of the JSON list %(slots)s: whether a start waits there for a slot (waiting_ahead
-- with mode 'concurrency') and the slots in use there (slots_in_use).
SELECT s.value ->> 0 AS scope, s.value ->> 1 AS key,
    -- the head of the key's line, one probe of lockgate_pending_hold: written as EXISTS, it is planned as
    -- a hashed SubPlan that reads every parked row of the mode, on every decision; without the ORDER BY,
    -- as a table scan that stops at the first match, after however many drained rows the heap starts with
    (SELECT 1 FROM lockgate_pending p
     WHERE p.mode = 'concurrency' AND p.hold_scope = s.value ->> 0 AND p.hold_key = s.value ->> 1
     ORDER BY p.priority DESC, p.seq LIMIT 1) IS NOT NULL AS ahead,
    (SELECT COUNT(*) FROM lockgate_slots t WHERE t.scope = s.value ->> 0 AND t.key = s.value ->> 1) AS used
FROM json_array_elements(%(slots)s::json) AS s(value);

-- name: take_slot
INSERT INTO lockgate_slots (run_id, scope, key, workflow, acquired_at, expires_at)
VALUES (%(run_id)s, %(scope)s, %(key)s, %(workflow)s, %(now)s, %(expires_at)s);

-- name: holds_slot
SELECT COUNT(*) AS n FROM lockgate_slots WHERE run_id = %(run_id)s;

-- name: free_slot
DELETE FROM lockgate_slots WHERE run_id = %(run_id)s;

-- name: free_slots
-- free_slot for each of %(ids)s (a JSON list of run ids).
DELETE FROM lockgate_slots WHERE run_id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: insert_ledger
INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, reason, folded, waited, pending_id,
    run_id, at, source, trace_id)
VALUES (%(ticket)s, %(kind)s, %(workflow)s, %(control)s, %(key)s, %(outcome)s, %(reason)s, %(folded)s, %(waited)s, %(pending_id)s,
    %(run_id)s, %(at)s, %(source)s, %(trace_id)s)
RETURNING id;

-- name: insert_ledger_rows
-- insert_ledger without the id back (nobody waits for it): many rows at once (Tx.execute_values), ids in row order.
INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, reason, folded, waited, pending_id,
    run_id, at, source, trace_id)
VALUES (%(ticket)s, %(kind)s, %(workflow)s, %(control)s, %(key)s, %(outcome)s, %(reason)s, %(folded)s, %(waited)s, %(pending_id)s,
    %(run_id)s, %(at)s, %(source)s, %(trace_id)s);

-- name: insert_pending_rows
-- insert_pending whose seq is the id of the ledger row naming the start (its arrival's, written before it):
-- many rows at once (Tx.execute_values), without waiting for the ids. That row was written at first_at
-- (gate/parking.py arrival_rows): the ledger is partitioned by that time (migration 0052), so the lookup
-- reads one partition, not each.
INSERT INTO lockgate_pending (id, workflow, ticket, mode, stage, hold_scope, hold_key, group_key, singleton_key,
    payload, items, keys, identity, idempotency_key, folded, priority, fair_key, on_failure, retry_of, source, trace_id, subject, seq,
    first_at, last_at, due_at, expires_at)
VALUES (%(id)s, %(workflow)s, %(ticket)s, %(mode)s, %(stage)s, %(hold_scope)s, %(hold_key)s, %(group_key)s, %(singleton_key)s,
    %(payload)s, %(items)s, %(keys)s, %(identity)s, %(idempotency_key)s, %(folded)s, %(priority)s, %(fair_key)s, %(on_failure)s,
    %(retry_of)s, %(source)s, %(trace_id)s, %(subject)s, (SELECT l.id FROM lockgate_ledger l WHERE l.pending_id = %(id)s AND l.at = %(first_at)s),
    %(first_at)s, %(last_at)s, %(due_at)s, %(expires_at)s);

-- name: due_pending
SELECT * FROM lockgate_pending
WHERE due_at IS NOT NULL AND due_at <= %(now)s AND mode <> 'paused'
ORDER BY priority DESC, seq LIMIT %(limit)s;

-- name: expired_pending
SELECT * FROM lockgate_pending WHERE expires_at IS NOT NULL AND expires_at <= %(now)s ORDER BY seq LIMIT %(limit)s;

-- name: waiting_keys
-- Each (scope, key) a start waits at for a slot: a skip along lockgate_pending_hold, one probe per key
-- (a GROUP BY would read every parked row).
WITH RECURSIVE k (hold_scope, hold_key) AS (
    (SELECT hold_scope, hold_key FROM lockgate_pending
     WHERE mode = 'concurrency' AND hold_scope IS NOT NULL AND hold_key IS NOT NULL
     ORDER BY hold_scope, hold_key LIMIT 1)
    UNION ALL
    SELECT nxt.hold_scope, nxt.hold_key FROM k CROSS JOIN LATERAL (
        SELECT p.hold_scope, p.hold_key FROM lockgate_pending p
        WHERE p.mode = 'concurrency' AND (p.hold_scope, p.hold_key) > (k.hold_scope, k.hold_key)
        ORDER BY p.hold_scope, p.hold_key LIMIT 1) AS nxt
)
SELECT hold_scope, hold_key FROM k;

-- name: waiting_for_key
SELECT * FROM lockgate_pending
WHERE mode = 'concurrency' AND hold_scope = %(scope)s AND hold_key = %(key)s
ORDER BY priority DESC, seq LIMIT %(limit)s;

-- name: handoff_rows
-- The starts next in line for a concurrency key, as many as it has room for (read under the key's lock), with
-- what tells whether a control can still hold them (pending_by_ids). Rows another decider has locked are its own.
-- live: the workers alive now (not stopped, heartbeat within their lease; %(lease)s for those without).
SELECT p.id, p.ticket, p.mode, p.stage, p.due_at, p.expires_at, p.keys, p.identity, p.items IS NOT NULL AS has_items,
    p.payload, p.idempotency_key, p.retry_of, p.source, p.trace_id, p.subject,
    (SELECT COUNT(*) FROM lockgate_workers WHERE stopped_at IS NULL
       AND heartbeat_at + COALESCE(lease, %(lease)s) >= %(now)s) AS live
FROM lockgate_pending p
WHERE p.id = ANY (ARRAY(
    SELECT id FROM lockgate_pending
    WHERE mode = 'concurrency' AND hold_scope = %(scope)s AND hold_key = %(key)s
    ORDER BY priority DESC, seq
    LIMIT GREATEST(0, %(limit)s - (SELECT COUNT(*) FROM lockgate_slots WHERE scope = %(scope)s AND key = %(key)s))))
ORDER BY p.priority DESC, p.seq
FOR UPDATE OF p SKIP LOCKED;

-- name: handoff_transfer
-- handoff_rows without the key's lock: the starts next in line for a concurrency key, one for each of the
-- %(freed)s slots this transaction freed there (fewer where the key holds more than its limit), each slot
-- passing from the run that ended to the start that takes it. Rows another decider has locked are skipped,
-- the next ones taken instead (the lock is taken before the LIMIT counts).
SELECT p.id, p.ticket, p.mode, p.stage, p.due_at, p.expires_at, p.keys, p.identity, p.items IS NOT NULL AS has_items,
    p.payload, p.idempotency_key, p.retry_of, p.source, p.trace_id, p.subject,
    (SELECT COUNT(*) FROM lockgate_workers WHERE stopped_at IS NULL
       AND heartbeat_at + COALESCE(lease, %(lease)s) >= %(now)s) AS live
FROM lockgate_pending p
WHERE p.mode = 'concurrency' AND p.hold_scope = %(scope)s AND p.hold_key = %(key)s
ORDER BY p.priority DESC, p.seq
LIMIT LEAST(%(freed)s, GREATEST(0, %(limit)s - (SELECT COUNT(*) FROM lockgate_slots WHERE scope = %(scope)s AND key = %(key)s)))
FOR UPDATE OF p SKIP LOCKED;

-- name: handoff_line
-- Beside handoff_transfer: room, the key's limit less its slots in use as this transaction sees them (its
-- own freed slots gone); waiting, the starts in line, counted up to one more than the slots freed.
SELECT %(limit)s - (SELECT COUNT(*) FROM lockgate_slots WHERE scope = %(scope)s AND key = %(key)s) AS room,
    (SELECT COUNT(*) FROM (SELECT 1 FROM lockgate_pending
       WHERE mode = 'concurrency' AND hold_scope = %(scope)s AND hold_key = %(key)s
       ORDER BY priority DESC, seq LIMIT %(freed)s + 1) AS line) AS waiting;

-- name: paused_pending
SELECT * FROM lockgate_pending WHERE mode = 'paused' AND workflow = %(workflow)s ORDER BY priority DESC, seq;

-- name: pending_workflows
SELECT DISTINCT workflow FROM lockgate_pending;

-- name: drain_probe
-- Whether a drainer's pass has anything to look at: a start waiting for a slot, a held slot (it may be an
-- orphan), and the first instant a parked start or a running run falls due (next_pending_due). While none
-- waits, none is held and nothing is due yet, the pass is this one read instead of its seven.
SELECT (SELECT hold_scope FROM lockgate_pending  -- waiting_keys' first probe (an EXISTS would drop its order)
        WHERE mode = 'concurrency' AND hold_scope IS NOT NULL AND hold_key IS NOT NULL
        ORDER BY hold_scope, hold_key LIMIT 1) IS NOT NULL AS waiting,
    EXISTS (SELECT 1 FROM lockgate_slots) AS held,
    (SELECT MIN(t) FROM (
        SELECT MIN(due_at) AS t FROM lockgate_pending WHERE due_at IS NOT NULL AND mode <> 'paused'
        UNION ALL SELECT MIN(expires_at) AS t FROM lockgate_pending WHERE expires_at IS NOT NULL
        UNION ALL SELECT MIN(deadline_at) AS t FROM lockgate_runs WHERE deadline_at IS NOT NULL AND status = 'running'
    ) AS due) AS at;

-- name: next_pending_due
SELECT MIN(t) AS at FROM (
    SELECT MIN(due_at) AS t FROM lockgate_pending WHERE due_at IS NOT NULL AND mode <> 'paused'
    UNION ALL SELECT MIN(expires_at) AS t FROM lockgate_pending WHERE expires_at IS NOT NULL
    UNION ALL SELECT MIN(deadline_at) AS t FROM lockgate_runs WHERE deadline_at IS NOT NULL AND status = 'running'
) AS due;

-- name: overdue_runs
SELECT id FROM lockgate_runs WHERE deadline_at IS NOT NULL AND deadline_at <= %(now)s AND status = 'running'
ORDER BY deadline_at LIMIT %(limit)s;

-- name: orphan_slots
SELECT s.run_id FROM lockgate_slots s LEFT JOIN lockgate_runs r ON r.id = s.run_id
WHERE r.id IS NULL OR r.status NOT IN ('running', 'suspended') OR (s.expires_at IS NOT NULL AND s.expires_at <= %(now)s)
LIMIT %(limit)s;

-- name: ledger_for_ticket
SELECT * FROM lockgate_ledger WHERE ticket = %(ticket)s ORDER BY id;

-- name: ledger_for_pending
SELECT * FROM lockgate_ledger WHERE pending_id = %(pending_id)s ORDER BY id;

-- name: ledger_for_tickets
-- The rows of the arrivals in %(tickets)s (a JSON list of tickets), in order: what settles a parked start.
SELECT id, ticket, kind, outcome, reason, run_id, pending_id FROM lockgate_ledger WHERE ticket = ANY (ARRAY(SELECT jsonb_array_elements_text(%(tickets)s::jsonb))) ORDER BY id;

-- name: ledger_for_pendings
-- The rows of the parked rows in %(ids)s (a JSON list of pending ids), in order.
SELECT id, ticket, kind, outcome, reason, run_id, pending_id FROM lockgate_ledger WHERE pending_id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb))) ORDER BY id;

-- name: pending_position
SELECT COUNT(*) AS n FROM lockgate_pending
WHERE workflow = %(workflow)s AND mode = %(mode)s AND COALESCE(hold_key, '') = COALESCE(%(hold_key)s, '')
  AND (priority > %(priority)s OR (priority = %(priority)s AND seq < %(seq)s));

-- name: recent_durations
SELECT AVG(finished_at - created_at) AS avg FROM (
    SELECT finished_at, created_at FROM lockgate_runs
    WHERE workflow = %(workflow)s AND status = 'succeeded' ORDER BY created_at DESC LIMIT 50) AS recent;

-- name: flow_pending
-- Parked rows per workflow, mode, key and source (where a start came from, e.g. event:<name>): one workflow's, or
-- (no :workflow) every workflow's. The counts kept by migration 0018's triggers, and the oldest of each group
-- by one probe of lockgate_pending_flow: as many rows to read as there are groups, however many are parked.
SELECT c.workflow, c.mode, c.key, c.source, c.queued,
    (SELECT p.first_at FROM lockgate_pending p
     WHERE p.workflow = c.workflow AND p.mode = c.mode AND COALESCE(p.hold_key, '') = c.key
         AND COALESCE(p.source, '') = c.source
     ORDER BY p.first_at LIMIT 1) AS oldest
FROM (
    SELECT workflow, mode, key, source, SUM(n) AS queued FROM lockgate_pending_counts
    WHERE workflow = %(workflow)s::text OR %(workflow)s::text IS NULL
    GROUP BY workflow, mode, key, source HAVING SUM(n) > 0
) AS c;

-- name: flow_slots
SELECT workflow, key, COUNT(*) AS in_flight FROM lockgate_slots
WHERE (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text) GROUP BY workflow, key;

-- name: flow_running
-- One workflow's running runs from lockgate_runs_workflow alone, or (no :workflow) every workflow's.
SELECT workflow, COUNT(*) AS in_flight FROM lockgate_runs
WHERE workflow = %(workflow)s::text AND status = 'running' GROUP BY workflow
UNION ALL
SELECT workflow, COUNT(*) AS in_flight FROM lockgate_runs
WHERE %(workflow)s::text IS NULL AND status = 'running' GROUP BY workflow;

-- name: flow_counts
-- Every decision per workflow, key and outcome: the trigger's counts, summed over the writers' parts.
SELECT workflow, key, outcome, SUM(n) AS n FROM lockgate_flow_counts WHERE workflow = %(workflow)s::text
GROUP BY workflow, key, outcome
UNION ALL
SELECT workflow, key, outcome, SUM(n) AS n FROM lockgate_flow_counts WHERE %(workflow)s::text IS NULL
GROUP BY workflow, key, outcome;

-- name: flow_ledger
-- The decisions since :since per workflow, key and outcome (as many ledger rows as that period holds).
SELECT workflow, COALESCE(key, '') AS key, outcome, COUNT(*) AS n FROM lockgate_ledger
WHERE at >= %(since)s AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
GROUP BY workflow, COALESCE(key, ''), outcome;

-- name: ledger_unfolded
-- The SQLite store folds ledger rows into lockgate_flow_counts at commit with this query and the next two.
-- Here the trigger of migration 0006 counts them as they are written: nothing is left to fold, and the
-- PostgreSQL store runs none of the three.
SELECT 0 AS n;

-- name: count_ledger
-- See ledger_unfolded.
SELECT 0 AS counted;

-- name: ledger_counted
-- See ledger_unfolded.
SELECT 0 AS counted;

-- name: bulk_candidates
SELECT id, workflow, status FROM lockgate_runs
WHERE (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text) AND status IN (SELECT jsonb_array_elements_text(%(statuses)s::jsonb))
  AND (%(include_discarded)s::integer = 1 OR discarded_at IS NULL)
ORDER BY created_at, id LIMIT %(limit)s;

-- name: cancel_pending_of
SELECT * FROM lockgate_pending WHERE workflow = %(workflow)s ORDER BY seq LIMIT %(limit)s;

-- name: release_pending
UPDATE lockgate_pending SET mode = 'released', due_at = %(now)s WHERE id = %(id)s;

-- name: release_key_pending
UPDATE lockgate_pending SET due_at = %(now)s WHERE mode = 'key-paused' AND hold_key = %(key)s;

-- name: pending_by_ids
-- The drainer's chunk as it is now (a fold, a cancel or an expiry may have moved a row since it was selected):
-- what tells whether a control can still hold a row (the pipeline reads a held row whole). Locked until
-- commit, so a cancel on another replica waits for the decision instead of racing it. An open debounce or
-- batch group's key lock (lock_key 'group') is taken first, in key order, as an arrival takes it before it
-- folds into the group: else an arrival could fold into a group this drain flushes meanwhile, and be lost.
WITH groups AS MATERIALIZED (
    SELECT pg_advisory_xact_lock(hashtextextended('group' || chr(31) || group_key, 0)) FROM (
        SELECT DISTINCT group_key FROM lockgate_pending
        WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb))) AND group_key IS NOT NULL
        ORDER BY group_key
    ) AS open_groups
)
SELECT id, ticket, mode, stage, due_at, keys, identity, items IS NOT NULL AS has_items FROM lockgate_pending
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb))) AND (SELECT COUNT(*) FROM groups) >= 0
FOR UPDATE;

-- name: due_pending_order
-- What the drainer orders due rows by (each chunk reads its rows again, in its transaction).
SELECT id, workflow, ticket, priority, seq, fair_key, hold_scope, hold_key FROM lockgate_pending
WHERE due_at IS NOT NULL AND due_at <= %(now)s AND mode <> 'paused'
ORDER BY priority DESC, seq LIMIT %(limit)s;

-- name: release_paused
UPDATE lockgate_pending SET mode = 'released', due_at = %(now)s WHERE mode = 'paused' AND workflow = %(workflow)s
RETURNING id;

-- name: ledger_released
-- The `released` decision of each start release_paused released (%(ids)s), in drain order.
INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, reason, folded, waited, pending_id,
    run_id, at)
SELECT ticket, 'drain', workflow, 'paused', hold_key, 'released', 'unpaused', folded,
    %(now)s::double precision - first_at, id, NULL, %(now)s::double precision
FROM lockgate_pending WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb))) ORDER BY priority DESC, seq;

-- name: admit_parked_runs
-- %(admitted)s is a JSON list of [pending id, run id, data, slot scope, slot key], one per parked row of
-- workflow %(workflow)s no control holds but a concurrency slot it has room for (scope and key, else absent);
-- each becomes a run (its id is its identity, fresh: never spent) with the workflow's columns. With an
-- %(owner)s, the first %(claims)s are claimed for it (the columns claim_runs sets) as they are created.
INSERT INTO lockgate_runs (id, workflow, identity, idempotency_key, status, payload, version, patches,
    parent_id, parent_close, retry_of, source, trace_id, subject, ticket, recording, created_at, updated_at, progress_at, wake_at,
    singleton_key, deadline_at, on_failure, slot_scope, slot_key, owner, lease_until, epoch, entered_at, entries,
    flow_control)
SELECT a.value ->> 1, %(workflow)s::text, a.value ->> 1, p.idempotency_key, 'running', p.payload,
    %(version)s::text, %(patches)s::text, NULL, NULL, p.retry_of, p.source, p.trace_id, p.subject, p.ticket, %(recording)s::text,
    %(now)s::double precision, %(now)s::double precision, %(now)s::double precision, %(now)s::double precision,
    NULL, %(deadline_at)s::double precision, %(on_failure)s::text, a.value ->> 3, a.value ->> 4,
    CASE WHEN a.n <= %(claims)s THEN %(owner)s::text END,
    CASE WHEN a.n <= %(claims)s THEN %(lease_until)s::double precision END,
    CASE WHEN a.n <= %(claims)s THEN 1 ELSE 0 END, CASE WHEN a.n <= %(claims)s THEN %(now)s::double precision END,
    CASE WHEN a.n <= %(claims)s THEN 1 ELSE 0 END,
    -- the step flow control given at start rides on the parked row's keys ($flow)
    CASE WHEN p.keys LIKE '%%"$flow"%%' THEN p.keys::json ->> '$flow' END
FROM json_array_elements(%(admitted)s::json) WITH ORDINALITY AS a(value, n)
CROSS JOIN LATERAL (SELECT * FROM lockgate_pending WHERE id = a.value ->> 0 LIMIT 1) p
ORDER BY a.n;

-- name: admit_parked_events
-- %(admitted)s is a JSON list of [pending id, run id, run-started data], in decision order.
INSERT INTO lockgate_run_events (run_id, type, at, data)
SELECT a.value ->> 1, 'run-started', %(now)s::double precision, a.value ->> 2
FROM json_array_elements(%(admitted)s::json) WITH ORDINALITY AS a(value, n)
ORDER BY a.n;

-- name: admit_parked_slots
-- The slots the runs admitted with a slot scope and key take, as take_slot would.
INSERT INTO lockgate_slots (run_id, scope, key, workflow, acquired_at, expires_at)
SELECT r.id, a.value ->> 3, a.value ->> 4, r.workflow, %(now)s::double precision, r.deadline_at
FROM json_array_elements(%(admitted)s::json) WITH ORDINALITY AS a(value, n)
CROSS JOIN LATERAL (SELECT * FROM lockgate_runs WHERE id = a.value ->> 1 LIMIT 1) r
WHERE a.value ->> 3 IS NOT NULL
ORDER BY a.n;

-- name: admit_parked_ledger
INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, reason, folded, waited, pending_id,
    run_id, at)
SELECT p.ticket, 'drain', p.workflow, p.mode, p.hold_key, 'admitted', NULL, p.folded,
    %(now)s::double precision - p.first_at, p.id, a.value ->> 1, %(now)s::double precision
FROM json_array_elements(%(admitted)s::json) WITH ORDINALITY AS a(value, n)
CROSS JOIN LATERAL (SELECT * FROM lockgate_pending WHERE id = a.value ->> 0 LIMIT 1) p
ORDER BY a.n;

-- name: admit_parked_delete
DELETE FROM lockgate_pending WHERE id = ANY (ARRAY(SELECT value ->> 0 FROM json_array_elements(%(admitted)s::json)))
RETURNING id;

-- name: bucket_state
-- A token-bucket throttle key's state (rules.Bucket), read under the key's lock.
SELECT anchor, n, last_at FROM lockgate_buckets WHERE scope = %(scope)s AND key = %(key)s;

-- name: set_bucket
INSERT INTO lockgate_buckets (scope, key, anchor, n, last_at)
VALUES (%(scope)s, %(key)s, %(anchor)s, %(n)s, %(last_at)s)
ON CONFLICT (scope, key) DO UPDATE SET anchor = excluded.anchor, n = excluded.n, last_at = excluded.last_at;

-- name: admit_parked_drop
-- The admitted rows, locked by this transaction (handoff_rows), deleted: nobody else can have decided them.
-- silent: run for its effect; COMMIT may follow it without a wait for its answer
DELETE FROM lockgate_pending WHERE id = ANY (ARRAY(SELECT value ->> 0 FROM json_array_elements(%(admitted)s::json)));

-- name: quiet_slot_frees
-- Slots freed from here until this is set back to '' are passed on in this transaction: their DELETE wakes
-- no drainer (migration 0023). Local to the transaction.
-- silent: run for its effect; nothing waits for its answer
SELECT set_config('lockgate.passing', %(passing)s, true) AS passing;

-- name: wake_drainers
-- The 'gate' wake-up the slot trigger would raise (lockgate_wake, migration 0003), raised by a hand-off that
-- left starts for the drainer to decide.
-- silent: run for its effect; nothing waits for its answer
SELECT pg_notify('lockgate', json_build_array(COALESCE(current_setting('lockgate.origin', true), ''), 'gate', '')::text) AS woke;
