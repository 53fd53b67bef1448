-- PostgreSQL widens a step flow key's counts to BIGINT here; SQLite's integers are 64-bit already.
SELECT 1;
