"""A signal, a token's completion or a compensating cancel sent while its run parks reaches it.

PostgreSQL only (a second session). The send and the park meet on the run's row: the park's
update waits for a send that holds it and then finds the message (or the cancel's mark on the
row), or the send waits for the park and then wakes the parked run. A send whose wake-up came
before the park and whose commit came after the park looked used to wake nothing: the run
slept until its wait's timeout, or for ever without one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.ids import new_id
from lockgate.store import callbacks, messages, runs
from lockgate.testing import TestEnv

from .apps.waits import eventually


class Empty(BaseModel):
    pass


class Word(BaseModel):
    word: str


def make_app(entered: asyncio.Event, release: asyncio.Event) -> lg.App:
    app = lg.App()

    async def hold() -> int:
        entered.set()
        await release.wait()
        return 1

    @app.workflow(name="waits")
    async def waits(ctx: lg.Context, p: Empty) -> str | None:
        await ctx.step("ready", hold)
        got = await ctx.wait_for_signal("go", Word)  # no timeout: a send the park missed is never taken
        return None if got is None else got.word

    @app.workflow(name="approves")
    async def approves(ctx: lg.Context, p: Empty) -> str:
        token = await ctx.create_token("approve", model=Word)
        await ctx.step("ready", hold)
        got: Word = await ctx.wait_for_token(token)
        return got.word

    return app


@pytest.mark.parametrize("sent", ["signal", "token", "cancel"])
@pytest.mark.parametrize("order", ["send-first", "park-first"])
async def test_what_is_sent_as_a_run_parks_reaches_it(
    env_factory: Callable[..., TestEnv], store_kind: str, store_url: str, order: str, sent: str
) -> None:
    if store_kind != "postgres":
        pytest.skip("one writer on SQLite: a send and a park never overlap")
    entered, release = asyncio.Event(), asyncio.Event()
    async with env_factory(make_app(entered, release)) as env:
        engine = env.engine
        h = await engine.start("approves" if sent == "token" else "waits", {})
        assert h.run_id is not None
        await asyncio.wait_for(entered.wait(), 15)
        async with await psycopg.AsyncConnection.connect(store_url, autocommit=True) as watch:

            async def parked_or_waiting() -> bool:
                row = await (
                    await watch.execute(
                        "SELECT (SELECT owner IS NULL AND waiting_on IN ('signal', 'token')"
                        "   FROM lockgate_runs WHERE id = %s)"
                        " OR EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                        "   AND wait_event_type = 'Lock')",
                        [h.run_id],
                    )
                ).fetchone()
                return bool(row and row[0])

            async with await psycopg.AsyncConnection.connect(store_url) as conn, conn.transaction():
                if order == "park-first":  # the run parks (committed) before the send begins
                    release.set()
                    await eventually(parked_or_waiting, timeout=15, what="the run parked")
                message = {"id": new_id("msg"), "run_id": h.run_id, "kind": "signal", "name": "go"}
                message["payload"] = '{"word": "yes"}'
                async with engine.store.join(conn) as joined:  # another process's send, not committed yet
                    if sent == "signal":
                        await messages.send_message(joined.tx, message, env.clock.now())
                    elif sent == "token":
                        [token] = await engine.store.read(callbacks.run_tokens, h.run_id)
                        done = {"id": message["id"], "payload": '{"value": {"word": "yes"}}'}
                        await callbacks.complete_token(joined.tx, None, token["id"], done, env.clock.now())
                    else:
                        await runs.request_cancel(joined.tx, h.run_id, "elsewhere", env.clock.now())
                if order == "send-first":  # the run looks for the message now, and parks (or waits to)
                    release.set()
                    await eventually(parked_or_waiting, timeout=15, what="the run parked or waited for the send")
            # committed: the run goes on (or is cancelled) without waiting for anything more
            if sent != "cancel":
                assert await engine.result(h.run_id, timeout=15) == "yes"
            else:
                with pytest.raises(lg.RunCancelled):
                    await engine.result(h.run_id, timeout=15)
