"""The admission gate: every start is decided here, before a run exists."""
