"""Benchmarks: ``python -m bench.core`` and friends (figures in ``docs/performance.md``)."""
