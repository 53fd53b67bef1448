-- A run's end that passes its concurrency slot straight on (gate/handoff.py) frees the slot and
-- admits the starts next in line in the same transaction: no other process has anything to drain
-- for that slot, so its DELETE raises no 'gate' wake-up while the transaction says it is passing
-- slots on (the setting lockgate.passing). When the hand-off leaves work behind it raises the
-- wake-up itself (gate.sql: wake_drainers).
DROP TRIGGER lockgate_slots_wake ON lockgate_slots;
CREATE TRIGGER lockgate_slots_wake AFTER DELETE ON lockgate_slots FOR EACH ROW
    WHEN (current_setting('lockgate.passing', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION lockgate_wake('gate');
