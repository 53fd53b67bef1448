-- Reserved for the schedules migration, developed alongside: the merge replaces this file with it.
-- Numbered so that 0009_events applies on its own meanwhile (versions run 1..n without gaps).
SELECT 1;
