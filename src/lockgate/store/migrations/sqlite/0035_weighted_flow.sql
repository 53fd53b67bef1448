-- Weighted step flow keys (FlowControl(cost=), ctx.rate_limit(cost=)): a key's window counts units (tokens,
-- say) rather than calls. A key says whether it is weighted; each start in a window carries the units it
-- reserved (1 for a call counted as one, so that a plain key's sum is its count) and, once the call settled,
-- the units it really used, which count in its place from then on. A waiting step keeps the units it asks
-- for, so that whoever makes room knows whether the first in line now fits.
ALTER TABLE lockgate_flow_keys ADD COLUMN weighted INTEGER;
ALTER TABLE lockgate_flow_starts ADD COLUMN units INTEGER NOT NULL DEFAULT 1;
ALTER TABLE lockgate_flow_starts ADD COLUMN settled INTEGER;
ALTER TABLE lockgate_flow_slots ADD COLUMN units INTEGER;
