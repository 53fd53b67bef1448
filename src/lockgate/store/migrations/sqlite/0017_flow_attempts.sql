-- A step waiting for its flow key between two attempts of a retry keeps its count on its waiting row:
-- the run parks meanwhile, and the step entered again after the wake goes on from that attempt (and
-- from its first attempt's start, which a retry policy's elapsed budget counts from).
ALTER TABLE lockgate_flow_slots ADD COLUMN attempt INTEGER;
ALTER TABLE lockgate_flow_slots ADD COLUMN first_at REAL;
