"""Store operations for activity over time: the gate's admissions per bucket of a period."""

from __future__ import annotations

from .base import Row, Tx

__all__ = ["admissions_per_bucket"]


async def admissions_per_bucket(tx: Tx, since: float, width: float, workflow: str | None) -> list[Row]:
    """``(workflow, key, bucket, n)`` for the admissions since ``since`` in buckets of ``width`` seconds."""
    return await tx.execute("admissions_per_bucket", {"since": since, "width": width, "workflow": workflow})
