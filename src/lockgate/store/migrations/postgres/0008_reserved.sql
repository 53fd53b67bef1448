-- Reserved for the encryption keys migration, developed alongside: the merge replaces this file with it
-- (or keeps it, if that work needs no table). Numbered so that 0009_events applies on its own meanwhile.
SELECT 1;
