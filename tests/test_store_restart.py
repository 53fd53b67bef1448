"""A COMMIT whose answer was lost, then the server restarted ``-m immediate``: its outcome is never guessed.

A transaction id that nothing durable named before the crash is handed out again after the
recovery. Asked after the restart, ``pg_xact_status`` of the lost transaction's id then tells
of another transaction: taken at its word, a commit that never became durable was
acknowledged (the nemesis suite's restarts lost acknowledged starts that way).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from lockgate.store import runs
from lockgate.store.postgres import PostgresStore
from lockgate.store.postgres.batches import Attempt

from .pgserver import PrivatePostgres

pytestmark = pytest.mark.slow


@pytest.fixture
def url(private_pg: PrivatePostgres) -> Iterator[str]:
    if not private_pg.running():
        private_pg.start()
    yield private_pg.create_database("restart")


@pytest.fixture
async def store(url: str) -> AsyncIterator[PostgresStore]:
    opened = PostgresStore(url)
    await opened.open()
    yield opened
    await opened.close()


def _xid(conn: psycopg.Connection[tuple[int]]) -> int:
    row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert row is not None
    return int(row[0])


async def test_a_lost_commit_whose_id_was_handed_out_again_after_a_restart_is_not_acknowledged(
    private_pg: PrivatePostgres, url: str, store: PostgresStore
) -> None:
    await store.write(runs.create_run, {"id": "r0", "workflow": "w", "payload": "{}", "patches": "[]"}, 1.0)
    state = Attempt()
    state.timeline, state.started = store._timeline, store._started  # what the writer knew when it sent COMMIT
    lost = psycopg.connect(url)
    state.xid = str(_xid(lost))  # an id handed out; nothing of its transaction was logged
    private_pg.stop("immediate")  # and the COMMIT's answer never came back
    lost.close()
    private_pg.start()
    with psycopg.connect(url, autocommit=True) as other:  # after the recovery, ids are handed out again
        for _ in range(1000):
            with other.transaction():
                reused = _xid(other)
            if reused >= int(state.xid):
                break
    assert reused == int(state.xid), "the restart handed out no id again: the case is not made"
    assert await store._committed(state) is not True


async def test_a_commit_made_durable_before_the_restart_is_not_guessed_either_way(
    private_pg: PrivatePostgres, url: str, store: PostgresStore
) -> None:
    await store.write(runs.create_run, {"id": "r0", "workflow": "w", "payload": "{}", "patches": "[]"}, 1.0)
    state = Attempt()
    state.timeline, state.started = store._timeline, store._started
    with psycopg.connect(url) as committed:
        state.xid = str(_xid(committed))
        committed.execute("CREATE TABLE kept (n int)")
        committed.commit()
    lost = Attempt()
    lost.timeline, lost.started = state.timeline, state.started
    with psycopg.connect(url) as aborted:
        aborted.execute("CREATE TABLE gone (n int)")
        lost.xid = str(_xid(aborted))
        aborted.rollback()
    private_pg.stop("immediate")
    private_pg.start()
    # Committed before the crash: without commit timestamps, nothing tells it from a reused id.
    assert await store._committed(state) is None
    assert await store._committed(lost) is False  # anything but "committed" is not committed
