"""Workflow apps and helpers shared by the engine tests (importable by worker subprocesses)."""
