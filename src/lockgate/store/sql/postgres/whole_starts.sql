-- name: start_bare_run
-- repeatable: a second run finds the identity spent and writes nothing.
-- A start no gate control holds, whole in one statement (and so one round trip in autocommit): the run,
-- its run-started event and its ledger row, the last two only if the run was inserted. It reports a
-- row changed only then; a spent identity changes none, and the start then goes the long way (whole_starts.py).
WITH inserted AS (
    INSERT INTO lockgate_runs (id, workflow, identity, idempotency_key, status, payload, version, patches,
        parent_id, parent_close, retry_of, source, trace_id, subject, ticket, recording, created_at, updated_at, progress_at, wake_at,
        singleton_key, deadline_at, on_failure, slot_scope, slot_key, owner, lease_until, epoch, entered_at, entries,
        flow_control)
    VALUES (%(id)s, %(workflow)s, %(identity)s, %(idempotency_key)s, 'running', %(payload)s, %(version)s, %(patches)s,
        %(parent_id)s, %(parent_close)s, %(retry_of)s, %(source)s, %(trace_id)s, %(subject)s, %(ticket)s, %(recording)s, %(now)s, %(now)s, %(now)s, %(wake_at)s,
        %(singleton_key)s, %(deadline_at)s, %(on_failure)s, %(slot_scope)s, %(slot_key)s,
        %(owner)s, %(lease_until)s, %(epoch)s, %(entered_at)s, %(entries)s, %(flow_control)s)
    ON CONFLICT (identity) DO NOTHING
    RETURNING id
), started AS (
    INSERT INTO lockgate_run_events (run_id, type, at, data)
    SELECT id, 'run-started', %(now)s::float8, %(started_data)s::text FROM inserted
)
INSERT INTO lockgate_ledger (ticket, kind, workflow, control, key, outcome, reason, folded, waited, pending_id,
    run_id, at, source, trace_id)
SELECT %(ticket)s::text, 'arrival', %(workflow)s::text, NULL, NULL, 'admitted', NULL, 1, NULL, NULL, id, %(now)s::float8,
    %(source)s::text, %(trace_id)s::text
FROM inserted;
