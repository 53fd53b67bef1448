"""The soak: a kill -9 cluster under mixed load, its invariants checked from the database."""
