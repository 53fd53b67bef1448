-- Steps waiting in place for a slot of their step flow key, found by index: a waiting row carries the epoch
-- of the hold its step waits under in its worker (NULL: its run parked, or was claimed again and has not
-- asked since). A freed slot goes to the first of them in line, and a step counts the held waiters ahead of
-- it, without reading past the parked runs ahead, however many there are.
ALTER TABLE lockgate_flow_slots ADD COLUMN held_epoch INTEGER;
CREATE INDEX lockgate_flow_slots_held ON lockgate_flow_slots (key, priority DESC, id)
    WHERE state = 'waiting' AND held_epoch IS NOT NULL;
