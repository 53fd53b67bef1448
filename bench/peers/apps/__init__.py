"""What runs inside each peer's virtual environment: a job body, the peer's app, the driver.

Every module here imports only its peer's public API, ``redis`` and ``psycopg``, so that it
runs in that peer's own environment (``bench/peers/venvs.py``); nothing imports lockgate but
``lockgate_app``.
"""
