"""Helpers for the multi-process cluster tests (``tests/test_cluster.py``) and ``bench/failover.py``."""
