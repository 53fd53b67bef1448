-- A start a hand-off grants names the slot it was granted to: should that run park before its step
-- ran (the slot back in line), the start goes back with it, so the window counts only starts made.
ALTER TABLE lockgate_flow_starts ADD COLUMN slot_id INTEGER;
