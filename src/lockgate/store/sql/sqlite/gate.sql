-- name: pending_by_identity
SELECT id, ticket FROM lockgate_pending WHERE identity = :identity LIMIT 1;

-- name: run_id_by_identity
SELECT id FROM lockgate_runs WHERE identity = :identity;

-- name: pause_of
SELECT scope, reason, until FROM lockgate_pauses
WHERE scope = :scope AND (until IS NULL OR until > :now);

-- name: key_pauses
SELECT scope, reason, until FROM lockgate_pauses
WHERE scope IN (SELECT value FROM json_each(:scopes)) AND (until IS NULL OR until > :now)
ORDER BY until DESC;

-- name: upsert_pause
INSERT INTO lockgate_pauses (scope, reason, until, created_at) VALUES (:scope, :reason, :until, :now)
ON CONFLICT (scope) DO UPDATE SET reason = excluded.reason, until = excluded.until, created_at = excluded.created_at;

-- name: delete_pause
DELETE FROM lockgate_pauses WHERE scope = :scope RETURNING scope;

-- name: list_pauses
SELECT * FROM lockgate_pauses WHERE until IS NULL OR until > :now ORDER BY scope;

-- name: window_nth
-- The limit-th most recent hit inside the window (none while it has room): one lookup by rank.
SELECT at FROM lockgate_window_hits
WHERE scope = :scope AND key = :key AND at > :since
    AND n = (SELECT MAX(n) FROM lockgate_window_hits WHERE scope = :scope AND key = :key) - :back;

-- name: window_queues
-- For each [scope, key, limit] of the JSON list :windows: its newest `limit` hits by rank (n, at), and a
-- row with n NULL when a start waits there for the window (waiting_ahead with mode 'throttle').
SELECT json_extract(w.value, '$[0]') AS scope, json_extract(w.value, '$[1]') AS key, h.n, h.at
FROM json_each(:windows) w
JOIN lockgate_window_hits h ON h.scope = json_extract(w.value, '$[0]') AND h.key = json_extract(w.value, '$[1]')
WHERE h.n > (SELECT MAX(m.n) FROM lockgate_window_hits m WHERE m.scope = h.scope AND m.key = h.key)
    - json_extract(w.value, '$[2]')
UNION ALL
SELECT json_extract(w.value, '$[0]'), json_extract(w.value, '$[1]'), NULL, NULL
FROM json_each(:windows) w
WHERE EXISTS (SELECT 1 FROM lockgate_pending p
              WHERE p.mode = 'throttle' AND p.hold_scope = json_extract(w.value, '$[0]')
                  AND p.hold_key = json_extract(w.value, '$[1]'));

-- name: add_window_hit
-- Ranked after the key's newest hit (decisions on one key are serialised: one writer, or the key's lock).
INSERT INTO lockgate_window_hits (scope, key, at, n)
SELECT :scope, :key, :at, COALESCE(MAX(n), 0) + 1
FROM lockgate_window_hits WHERE scope = :scope AND key = :key;

-- name: prune_window
DELETE FROM lockgate_window_hits WHERE scope = :scope AND key = :key AND at <= :before;

-- name: lock_key
SELECT 1 AS locked;

-- name: open_group
SELECT * FROM lockgate_pending WHERE group_key = :group_key;

-- name: open_groups
-- open_group for each group key of the JSON list :group_keys: one query for any number.
SELECT * FROM lockgate_pending WHERE group_key IN (SELECT value FROM json_each(:group_keys));

-- name: refold_pending
-- fold_pending many times over, as one write of where the folds left the row.
UPDATE lockgate_pending
SET payload = :payload, items = :items, identity = :identity, idempotency_key = :idempotency_key,
    folded = :folded, last_at = :last_at, due_at = :due_at, keys = :keys, priority = :priority,
    fair_key = :fair_key
WHERE id = :id;

-- name: insert_pending
INSERT INTO lockgate_pending (id, workflow, ticket, mode, stage, hold_scope, hold_key, group_key, singleton_key,
    payload, items, keys, identity, idempotency_key, folded, priority, fair_key, on_failure, retry_of, source, trace_id, subject, seq,
    first_at, last_at, due_at, expires_at)
VALUES (:id, :workflow, :ticket, :mode, :stage, :hold_scope, :hold_key, :group_key, :singleton_key,
    :payload, :items, :keys, :identity, :idempotency_key, :folded, :priority, :fair_key, :on_failure, :retry_of, :source, :trace_id, :subject, :seq,
    :first_at, :last_at, :due_at, :expires_at);

-- name: fold_pending
UPDATE lockgate_pending
SET payload = :payload, items = :items, identity = :identity, idempotency_key = :idempotency_key,
    folded = folded + 1, last_at = :now, due_at = :due_at, keys = :keys, priority = :priority, fair_key = :fair_key
WHERE id = :id;

-- name: repark_pending
UPDATE lockgate_pending
SET mode = :mode, stage = :stage, hold_scope = :hold_scope, hold_key = :hold_key, group_key = :group_key,
    payload = :payload, items = :items, keys = :keys, identity = :identity, idempotency_key = :idempotency_key,
    due_at = :due_at
WHERE id = :id;

-- name: delete_pending
DELETE FROM lockgate_pending WHERE id = :id RETURNING id;

-- name: get_pending
SELECT * FROM lockgate_pending WHERE id = :id;

-- name: waiting_ahead
SELECT 1 AS ahead FROM lockgate_pending
WHERE mode = :mode AND hold_scope = :scope AND hold_key = :key LIMIT 1;

-- name: singleton_incumbent
SELECT id FROM lockgate_runs
WHERE singleton_key = :singleton_key AND status IN ('running', 'suspended')
ORDER BY created_at LIMIT 1;

-- name: singleton_pending
SELECT id, ticket FROM lockgate_pending WHERE singleton_key = :singleton_key AND id <> :exclude LIMIT 1;

-- name: singleton_incumbents
SELECT id FROM lockgate_runs WHERE singleton_key = :singleton_key AND status IN ('running', 'suspended');

-- name: slots_in_use
SELECT COUNT(*) AS n FROM lockgate_slots WHERE scope = :scope AND key = :key;

-- name: slots_in_scope
SELECT COUNT(*) AS n FROM lockgate_slots WHERE scope = :scope;

-- name: slot_queues
-- For each [scope, key] of the JSON list :slots: whether a start waits there for a slot (waiting_ahead
-- with mode 'concurrency') and the slots in use there (slots_in_use).
SELECT json_extract(s.value, '$[0]') AS scope, json_extract(s.value, '$[1]') AS key,
    EXISTS (SELECT 1 FROM lockgate_pending p
            WHERE p.mode = 'concurrency' AND p.hold_scope = json_extract(s.value, '$[0]')
                AND p.hold_key = json_extract(s.value, '$[1]')) AS ahead,
    (SELECT COUNT(*) FROM lockgate_slots t
     WHERE t.scope = json_extract(s.value, '$[0]') AND t.key = json_extract(s.value, '$[1]')) AS used
FROM json_each(:slots) s;

-- name: take_slot
INSERT INTO lockgate_slots (run_id, scope, key, workflow, acquired_at, expires_at)
VALUES (:run_id, :scope, :key, :workflow, :now, :expires_at);

-- name: holds_slot
SELECT COUNT(*) AS n FROM lockgate_slots WHERE run_id = :run_id;

-- name: free_slot
DELETE FROM lockgate_slots WHERE run_id = :run_id;

-- name: free_slots
-- free_slot for each of :ids (a JSON list of run ids).
DELETE FROM lockgate_slots WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: insert_ledger
-- Its id (arrival order) is the connection's lastrowid (Tx.insert): RETURNING would cost more than the row.
INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, reason, folded, waited, pending_id,
    run_id, at, source, trace_id)
VALUES (:ticket, :kind, :workflow, :control, :key, :outcome, :reason, :folded, :waited, :pending_id,
    :run_id, :at, :source, :trace_id);

-- name: insert_ledger_rows
-- insert_ledger without the id back (nobody waits for it): many rows at once (Tx.execute_values), ids in row order.
INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, reason, folded, waited, pending_id,
    run_id, at, source, trace_id)
VALUES (:ticket, :kind, :workflow, :control, :key, :outcome, :reason, :folded, :waited, :pending_id,
    :run_id, :at, :source, :trace_id);

-- name: insert_pending_rows
-- insert_pending whose seq is the id of the ledger row naming the start (its arrival's, written before it):
-- many rows at once (Tx.execute_values), without waiting for the ids.
INSERT INTO lockgate_pending (id, workflow, ticket, mode, stage, hold_scope, hold_key, group_key, singleton_key,
    payload, items, keys, identity, idempotency_key, folded, priority, fair_key, on_failure, retry_of, source, trace_id, subject, seq,
    first_at, last_at, due_at, expires_at)
VALUES (:id, :workflow, :ticket, :mode, :stage, :hold_scope, :hold_key, :group_key, :singleton_key,
    :payload, :items, :keys, :identity, :idempotency_key, :folded, :priority, :fair_key, :on_failure, :retry_of,
    :source, :trace_id, :subject,
    (SELECT l.id FROM lockgate_ledger l WHERE l.pending_id = :id AND l.at = :first_at),
    :first_at, :last_at, :due_at, :expires_at);

-- name: due_pending
SELECT * FROM lockgate_pending
WHERE due_at IS NOT NULL AND due_at <= :now AND mode <> 'paused'
ORDER BY priority DESC, seq LIMIT :limit;

-- name: expired_pending
SELECT * FROM lockgate_pending WHERE expires_at IS NOT NULL AND expires_at <= :now ORDER BY seq LIMIT :limit;

-- name: waiting_keys
-- Each (scope, key) a start waits at for a slot: a skip along lockgate_pending_hold, one probe per key
-- (a GROUP BY would read every parked row). The next key is the next one in its scope, else the first
-- of the next scope (a row value comparison would search by scope alone and read the scope's rows).
WITH RECURSIVE k (hold_scope, hold_key) AS (
    SELECT * FROM (SELECT hold_scope, hold_key FROM lockgate_pending
                   WHERE mode = 'concurrency' AND hold_scope IS NOT NULL AND hold_key IS NOT NULL
                   ORDER BY hold_scope, hold_key LIMIT 1)
    UNION ALL
    SELECT n.hold_scope, n.hold_key FROM k JOIN lockgate_pending n ON n.id = COALESCE(
        (SELECT p.id FROM lockgate_pending p
         WHERE p.mode = 'concurrency' AND p.hold_scope = k.hold_scope AND p.hold_key > k.hold_key
         ORDER BY p.hold_key LIMIT 1),
        (SELECT p.id FROM lockgate_pending p
         WHERE p.mode = 'concurrency' AND p.hold_scope > k.hold_scope AND p.hold_key IS NOT NULL
         ORDER BY p.hold_scope, p.hold_key LIMIT 1))
)
SELECT hold_scope, hold_key FROM k;

-- name: waiting_for_key
SELECT * FROM lockgate_pending
WHERE mode = 'concurrency' AND hold_scope = :scope AND hold_key = :key
ORDER BY priority DESC, seq LIMIT :limit;

-- name: handoff_rows
-- The starts next in line for a concurrency key, as many as it has room for, with what tells whether a
-- control can still hold them (pending_by_ids). live: the workers alive now (not stopped, heartbeat within
-- their lease; :lease for those without).
SELECT id, ticket, mode, stage, due_at, expires_at, keys, identity, items IS NOT NULL AS has_items,
    payload, idempotency_key, retry_of, source, trace_id, subject,
    (SELECT COUNT(*) FROM lockgate_workers WHERE stopped_at IS NULL
       AND heartbeat_at + COALESCE(lease, :lease) >= :now) AS live
FROM lockgate_pending
WHERE mode = 'concurrency' AND hold_scope = :scope AND hold_key = :key
ORDER BY priority DESC, seq
LIMIT MAX(0, :limit - (SELECT COUNT(*) FROM lockgate_slots WHERE scope = :scope AND key = :key));

-- name: handoff_transfer
-- handoff_rows for the :freed slots this transaction freed at the key, and no more: where one writer decides
-- at a time it is handoff_rows with a smaller LIMIT (gate/handoff.py takes it on PostgreSQL only).
SELECT id, ticket, mode, stage, due_at, expires_at, keys, identity, items IS NOT NULL AS has_items,
    payload, idempotency_key, retry_of, source, trace_id, subject,
    (SELECT COUNT(*) FROM lockgate_workers WHERE stopped_at IS NULL
       AND heartbeat_at + COALESCE(lease, :lease) >= :now) AS live
FROM lockgate_pending
WHERE mode = 'concurrency' AND hold_scope = :scope AND hold_key = :key
ORDER BY priority DESC, seq
LIMIT MIN(:freed, MAX(0, :limit - (SELECT COUNT(*) FROM lockgate_slots WHERE scope = :scope AND key = :key)));

-- name: handoff_line
-- Beside handoff_transfer: room, the key's limit less its slots in use; waiting, the starts in line, counted
-- up to one more than the slots freed.
SELECT :limit - (SELECT COUNT(*) FROM lockgate_slots WHERE scope = :scope AND key = :key) AS room,
    (SELECT COUNT(*) FROM (SELECT 1 FROM lockgate_pending
       WHERE mode = 'concurrency' AND hold_scope = :scope AND hold_key = :key
       ORDER BY priority DESC, seq LIMIT :freed + 1)) AS waiting;

-- name: paused_pending
SELECT * FROM lockgate_pending WHERE mode = 'paused' AND workflow = :workflow ORDER BY priority DESC, seq;

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
    )) AS at;

-- name: next_pending_due
SELECT MIN(t) AS at FROM (
    SELECT MIN(due_at) AS t FROM lockgate_pending WHERE due_at IS NOT NULL AND mode <> 'paused'
    UNION ALL SELECT MIN(expires_at) AS t FROM lockgate_pending WHERE expires_at IS NOT NULL
    UNION ALL SELECT MIN(deadline_at) AS t FROM lockgate_runs WHERE deadline_at IS NOT NULL AND status = 'running'
);

-- name: overdue_runs
SELECT id FROM lockgate_runs WHERE deadline_at IS NOT NULL AND deadline_at <= :now AND status = 'running'
ORDER BY deadline_at LIMIT :limit;

-- name: orphan_slots
SELECT s.run_id FROM lockgate_slots s LEFT JOIN lockgate_runs r ON r.id = s.run_id
WHERE r.id IS NULL OR r.status NOT IN ('running', 'suspended') OR (s.expires_at IS NOT NULL AND s.expires_at <= :now)
LIMIT :limit;

-- name: ledger_for_ticket
SELECT * FROM lockgate_ledger WHERE ticket = :ticket ORDER BY id;

-- name: ledger_for_pending
SELECT * FROM lockgate_ledger WHERE pending_id = :pending_id ORDER BY id;

-- name: ledger_for_tickets
-- The rows of the arrivals in :tickets (a JSON list of tickets), in order: what settles a parked start.
SELECT id, ticket, kind, outcome, reason, run_id, pending_id FROM lockgate_ledger WHERE ticket IN (SELECT value FROM json_each(:tickets)) ORDER BY id;

-- name: ledger_for_pendings
-- The rows of the parked rows in :ids (a JSON list of pending ids), in order.
SELECT id, ticket, kind, outcome, reason, run_id, pending_id FROM lockgate_ledger WHERE pending_id IN (SELECT value FROM json_each(:ids)) ORDER BY id;

-- name: pending_position
SELECT COUNT(*) AS n FROM lockgate_pending
WHERE workflow = :workflow AND mode = :mode AND COALESCE(hold_key, '') = COALESCE(:hold_key, '')
  AND (priority > :priority OR (priority = :priority AND seq < :seq));

-- name: recent_durations
SELECT AVG(finished_at - created_at) AS avg FROM (
    SELECT finished_at, created_at FROM lockgate_runs
    WHERE workflow = :workflow AND status = 'succeeded' ORDER BY created_at DESC LIMIT 50);

-- name: flow_pending
-- Parked rows per workflow, mode, key and source (where a start came from, e.g. event:<name>): one workflow's, or
-- (no :workflow) every workflow's. The counts kept by migration 0018's triggers, and the oldest of each group
-- by one probe of lockgate_pending_flow: as many rows to read as there are groups, however many are parked.
SELECT c.workflow, c.mode, c.key, c.source, c.queued,
    -- +c.key: a value without the column's TEXT affinity, which the index's expressions do not have
    -- (compared with the column itself, SQLite would not search them)
    (SELECT p.first_at FROM lockgate_pending p
     WHERE p.workflow = c.workflow AND p.mode = c.mode AND COALESCE(p.hold_key, '') = +c.key
         AND COALESCE(p.source, '') = +c.source
     ORDER BY p.first_at LIMIT 1) AS oldest
FROM (
    SELECT workflow, mode, key, source, SUM(n) AS queued FROM lockgate_pending_counts
    WHERE workflow = :workflow OR :workflow IS NULL
    GROUP BY workflow, mode, key, source HAVING SUM(n) > 0
) AS c;

-- name: flow_slots
SELECT workflow, key, COUNT(*) AS in_flight FROM lockgate_slots
WHERE (:workflow IS NULL OR workflow = :workflow) GROUP BY workflow, key;

-- name: flow_running
-- One workflow's running runs from lockgate_runs_workflow alone, or (no :workflow) every workflow's.
SELECT workflow, COUNT(*) AS in_flight FROM lockgate_runs
WHERE workflow = :workflow AND status = 'running' GROUP BY workflow
UNION ALL
SELECT workflow, COUNT(*) AS in_flight FROM lockgate_runs
WHERE :workflow IS NULL AND status = 'running' GROUP BY workflow;

-- name: flow_counts
-- Every decision per workflow, key and outcome: the folded counts and the ledger rows past the fold.
SELECT workflow, key, outcome, SUM(n) AS n FROM (
    SELECT workflow, key, outcome, n FROM lockgate_flow_counts WHERE workflow = :workflow
    UNION ALL
    SELECT workflow, key, outcome, n FROM lockgate_flow_counts WHERE :workflow IS NULL
    UNION ALL
    SELECT workflow, COALESCE(key, ''), outcome, 1 FROM lockgate_ledger
    WHERE id > (SELECT upto FROM lockgate_flow_counted) AND (:workflow IS NULL OR workflow = :workflow))
GROUP BY workflow, key, outcome;

-- name: flow_ledger
-- The decisions since :since per workflow, key and outcome (as many ledger rows as that period holds).
SELECT workflow, COALESCE(key, '') AS key, outcome, COUNT(*) AS n FROM lockgate_ledger
WHERE at >= :since AND (:workflow IS NULL OR workflow = :workflow)
GROUP BY workflow, COALESCE(key, ''), outcome;

-- name: ledger_unfolded
-- How many ledger rows lie past the mark (the store folds them once they are enough).
SELECT (SELECT COALESCE(MAX(id), 0) FROM lockgate_ledger) - upto AS n FROM lockgate_flow_counted;

-- name: count_ledger
-- Fold the ledger rows past the mark into the counts (the store runs it before a commit).
INSERT INTO lockgate_flow_counts (workflow, key, outcome, part, n)
SELECT workflow, COALESCE(key, ''), outcome, 0, COUNT(*) FROM lockgate_ledger
WHERE id > (SELECT upto FROM lockgate_flow_counted)
GROUP BY workflow, COALESCE(key, ''), outcome
ON CONFLICT (workflow, key, outcome, part) DO UPDATE SET n = n + excluded.n;

-- name: ledger_counted
-- Move the mark past the rows count_ledger just folded.
UPDATE lockgate_flow_counted SET upto = (SELECT MAX(id) FROM lockgate_ledger)
WHERE upto < (SELECT MAX(id) FROM lockgate_ledger);

-- name: bulk_candidates
SELECT id, workflow, status FROM lockgate_runs
WHERE (:workflow IS NULL OR workflow = :workflow) AND status IN (SELECT value FROM json_each(:statuses))
  AND (:include_discarded = 1 OR discarded_at IS NULL)
ORDER BY created_at, id LIMIT :limit;

-- name: cancel_pending_of
SELECT * FROM lockgate_pending WHERE workflow = :workflow ORDER BY seq LIMIT :limit;

-- name: release_pending
UPDATE lockgate_pending SET mode = 'released', due_at = :now WHERE id = :id;

-- name: release_key_pending
UPDATE lockgate_pending SET due_at = :now WHERE mode = 'key-paused' AND hold_key = :key;

-- name: pending_by_ids
-- The drainer's chunk as it is now (a fold, a cancel or an expiry may have moved a row since it was selected):
-- what tells whether a control can still hold a row (the pipeline reads a held row whole).
SELECT id, ticket, mode, stage, due_at, keys, identity, items IS NOT NULL AS has_items FROM lockgate_pending
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: due_pending_order
-- What the drainer orders due rows by (each chunk reads its rows again, in its transaction).
SELECT id, workflow, ticket, priority, seq, fair_key, hold_scope, hold_key FROM lockgate_pending
WHERE due_at IS NOT NULL AND due_at <= :now AND mode <> 'paused'
ORDER BY priority DESC, seq LIMIT :limit;

-- name: release_paused
UPDATE lockgate_pending SET mode = 'released', due_at = :now WHERE mode = 'paused' AND workflow = :workflow
RETURNING id;

-- name: ledger_released
-- The `released` decision of each start release_paused released (:ids), in drain order.
INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, reason, folded, waited, pending_id,
    run_id, at)
SELECT ticket, 'drain', workflow, 'paused', hold_key, 'released', 'unpaused', folded, :now - first_at, id,
    NULL, :now
FROM lockgate_pending WHERE id IN (SELECT value FROM json_each(:ids)) ORDER BY priority DESC, seq;

-- name: admit_parked_runs
-- :admitted is a JSON list of [pending id, run id, data, slot scope, slot key], one per parked row of workflow
-- :workflow no control holds but a concurrency slot it has room for (scope and key, else absent); each becomes
-- a run (its id is its identity, fresh: never spent) with the workflow's columns. With an :owner, the
-- first :claims are claimed for it (the columns claim_runs sets) as they are created.
INSERT INTO lockgate_runs (id, workflow, identity, idempotency_key, status, payload, version, patches,
    parent_id, parent_close, retry_of, source, trace_id, subject, ticket, recording, created_at, updated_at, progress_at, wake_at,
    singleton_key, deadline_at, on_failure, slot_scope, slot_key, owner, lease_until, epoch, entered_at, entries,
    flow_control)
SELECT json_extract(a.value, '$[1]'), :workflow, json_extract(a.value, '$[1]'), p.idempotency_key, 'running',
    p.payload, :version, :patches, NULL, NULL, p.retry_of, p.source, p.trace_id, p.subject, p.ticket, :recording, :now, :now, :now, :now,
    NULL, :deadline_at, :on_failure, json_extract(a.value, '$[3]'), json_extract(a.value, '$[4]'),
    CASE WHEN a.key < :claims THEN :owner END, CASE WHEN a.key < :claims THEN :lease_until END,
    CASE WHEN a.key < :claims THEN 1 ELSE 0 END, CASE WHEN a.key < :claims THEN :now END,
    CASE WHEN a.key < :claims THEN 1 ELSE 0 END,
    -- the step flow control given at start rides on the parked row's keys ($flow)
    CASE WHEN p.keys LIKE '%"$flow"%' THEN json_extract(p.keys, '$."$flow"') END
FROM json_each(:admitted) a JOIN lockgate_pending p ON p.id = json_extract(a.value, '$[0]')
ORDER BY a.key;

-- name: admit_parked_events
-- :admitted is a JSON list of [pending id, run id, run-started data], in decision order.
INSERT INTO lockgate_run_events (run_id, type, at, data)
SELECT json_extract(value, '$[1]'), 'run-started', :now, json_extract(value, '$[2]') FROM json_each(:admitted)
ORDER BY key;

-- name: admit_parked_slots
-- The slots the runs admitted with a slot scope and key take, as take_slot would.
INSERT INTO lockgate_slots (run_id, scope, key, workflow, acquired_at, expires_at)
SELECT r.id, json_extract(a.value, '$[3]'), json_extract(a.value, '$[4]'), r.workflow, :now, r.deadline_at
FROM json_each(:admitted) a JOIN lockgate_runs r ON r.id = json_extract(a.value, '$[1]')
WHERE json_extract(a.value, '$[3]') IS NOT NULL
ORDER BY a.key;

-- name: admit_parked_ledger
INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, reason, folded, waited, pending_id,
    run_id, at)
SELECT p.ticket, 'drain', p.workflow, p.mode, p.hold_key, 'admitted', NULL, p.folded, :now - p.first_at, p.id,
    json_extract(a.value, '$[1]'), :now
FROM json_each(:admitted) a JOIN lockgate_pending p ON p.id = json_extract(a.value, '$[0]')
ORDER BY a.key;

-- name: admit_parked_delete
DELETE FROM lockgate_pending WHERE id IN (SELECT json_extract(value, '$[0]') FROM json_each(:admitted))
RETURNING id;

-- name: bucket_state
-- A token-bucket throttle key's state (rules.Bucket), read under the key's lock.
SELECT anchor, n, last_at FROM lockgate_buckets WHERE scope = :scope AND key = :key;

-- name: set_bucket
INSERT INTO lockgate_buckets (scope, key, anchor, n, last_at) VALUES (:scope, :key, :anchor, :n, :last_at)
ON CONFLICT (scope, key) DO UPDATE SET anchor = excluded.anchor, n = excluded.n, last_at = excluded.last_at;

-- name: admit_parked_drop
-- The admitted rows, locked by this transaction (handoff_rows), deleted: nobody else can have decided them.
-- silent: run for its effect; COMMIT may follow it without a wait for its answer
DELETE FROM lockgate_pending WHERE id IN (SELECT json_extract(value, '$[0]') FROM json_each(:admitted));

-- name: quiet_slot_frees
-- PostgreSQL only (one process decides on SQLite's single writer): never run here.
SELECT :passing AS passing;

-- name: wake_drainers
-- PostgreSQL only: never run here.
SELECT 1 AS woke;
