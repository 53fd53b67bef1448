"""lockgate beside the job queues Python teams pick first (Celery, RQ, procrastinate, pgqueuer,
huey) and DBOS, in one run: ``python -m bench.peers``. See ``bench/peers/run.py``.

This package is imported by the peers' own virtual environments too (``bench.peers.apps``):
keep it free of imports.
"""
