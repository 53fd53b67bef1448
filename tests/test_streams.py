"""Run streams: ``ctx.stream`` written in order across replays and retries, read live, capped, sealed, forgotten."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.crypto import generate_key
from lockgate.store import streams as store_streams
from lockgate.sweeps.retention import forget_expired


class Job(BaseModel):
    n: int = 3


class Go(BaseModel):
    ok: bool = True


FLAKY: dict[str, int] = {}


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="st.parks")
    async def parks(ctx: lg.Context, p: Job) -> str:
        await ctx.stream("before")
        await ctx.stream({"progress": 0}, topic="progress")

        async def words() -> str:
            for i in range(p.n):
                await ctx.stream(f"w{i}")
            return "done"

        await ctx.step("words", words)
        await ctx.wait_for_signal("go", Go)  # parks: the body is entered again from the top
        await ctx.stream("after")
        await ctx.stream({"progress": 100}, topic="progress")
        return "ok"

    @app.workflow(name="st.retry")
    async def retry(ctx: lg.Context, p: Job) -> str:
        async def answer() -> str:
            FLAKY[ctx.run_id] = FLAKY.get(ctx.run_id, 0) + 1
            for i in range(p.n):
                await ctx.stream(f"t{i}")
                if FLAKY[ctx.run_id] == 1 and i == 1:
                    raise RuntimeError("the model went away")
            return "answered"

        return str(await ctx.step("answer", answer, retry=lg.Retry(max_attempts=3, base_delay=0.01, jitter=False)))

    @app.workflow(name="st.capped")
    async def capped(ctx: lg.Context, p: Job) -> int:
        sent = 0
        try:
            for i in range(p.n):
                await ctx.stream(i)
                sent += 1
        except lg.StreamLimitExceeded:
            pass
        return sent

    return app


def sealed_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="st.sealed", encrypt_steps=True)
    async def sealed(ctx: lg.Context, p: Job) -> str:
        await ctx.stream({"secret": "card 4242"})
        return "sealed"

    return app


async def collect(handle: lg.RunHandle, topic: str = "default", after: int = 0) -> list[lg.StreamChunk]:
    return [c async for c in handle.stream(topic, after=after)]


async def test_chunks_are_numbered_in_order_and_a_replayed_body_does_not_stream_twice(make_engine: Any) -> None:
    async with make_engine(make_app()) as engine:
        handle = await engine.start("st.parks", {"n": 3})
        reader = asyncio.ensure_future(collect(handle))
        progress = asyncio.ensure_future(collect(handle, "progress"))
        for _ in range(200):
            if (await engine.get_run(handle.run_id)).waiting_on == "signal":
                break
            await asyncio.sleep(0.02)
        await engine.signal(handle.run_id, "go", {})
        assert await handle.result(timeout=10) == "ok"
        chunks = await asyncio.wait_for(reader, 10)
        assert [c.data for c in chunks] == ["before", "w0", "w1", "w2", "after"]
        assert [c.seq for c in chunks] == [1, 2, 3, 4, 5]
        assert [(c.step, c.attempt) for c in chunks][1] == ("words#0", 1)
        assert chunks[0].step is None and chunks[-1].step is None
        assert [c.data for c in await asyncio.wait_for(progress, 10)] == [{"progress": 0}, {"progress": 100}]
        # a reader that resumes past seq 3 gets the rest, and one of an ended run ends at once
        assert [c.seq for c in await collect(handle, after=3)] == [4, 5]


async def test_a_failed_attempt_is_reset_so_a_reader_keeps_one_copy(make_engine: Any) -> None:
    async with make_engine(make_app()) as engine:
        handle = await engine.start("st.retry", {"n": 3})
        assert await handle.result(timeout=10) == "answered"
        chunks = await collect(handle)
        assert [(c.kind, c.data, c.attempt) for c in chunks] == [
            ("chunk", "t0", 1),
            ("chunk", "t1", 1),
            ("reset", None, 1),
            ("chunk", "t0", 2),
            ("chunk", "t1", 2),
            ("chunk", "t2", 2),
        ]
        assert [c.data for c in lg.drop_resets(chunks)] == ["t0", "t1", "t2"]
        assert [c.seq for c in chunks] == list(range(1, 7))


async def test_the_cap_refuses_further_chunks_with_a_typed_error(make_engine: Any) -> None:
    async with make_engine(make_app(), stream_limits=lg.StreamLimits(chunks=4)) as engine:
        handle = await engine.start("st.capped", {"n": 10})
        assert await handle.result(timeout=10) == 4
        assert [c.data for c in await collect(handle)] == [0, 1, 2, 3]
    async with make_engine(make_app(), stream_limits=lg.StreamLimits(bytes=5)) as engine:
        handle = await engine.start("st.capped", {"n": 10})
        assert await handle.result(timeout=10) == 5  # "0".."4": one byte each
    with pytest.raises(lg.InvalidArgument):
        lg.StreamLimits(chunks=0)


async def test_an_encrypted_workflow_streams_sealed_chunks(make_engine: Any) -> None:
    async with make_engine(sealed_app(), encryption_keys=[generate_key()]) as engine:
        handle = await engine.start("st.sealed", {})
        assert await handle.result(timeout=10) == "sealed"
        rows = await engine.client.store.read(store_streams.chunks, handle.run_id, "default", 0, 10)
        assert len(rows) == 1 and "4242" not in rows[0]["data"] and "$sealed" in rows[0]["data"]
        assert [c.data for c in await collect(handle)] == [{"secret": "card 4242"}]


async def test_streams_go_with_their_run(env_factory: Any) -> None:
    async with env_factory(make_app(), retention="1h") as env:
        handle = await env.engine.start("st.capped", {"n": 3})
        assert await handle.result(timeout=10) == 3
        await env.advance("2h")
        assert (await forget_expired(env.engine.worker, env.engine.retention)).runs == 1
        assert await env.engine.client.store.read(store_streams.chunks, handle.run_id, "default", 0, 10) == []


async def test_stream_tokens_read_one_run_until_they_expire(env_factory: Any) -> None:
    async with env_factory(make_app()) as env:
        client = env.engine.client
        one = await env.engine.start("st.capped", {"n": 1})
        other = await env.engine.start("st.capped", {"n": 1})
        token = await client.stream_token(one.run_id, ttl="15m", topics=["default"])
        assert token.startswith("lgst1.")
        await client.check_stream_token(token, one.run_id, "default")
        refusals = {}
        for name, (tok, run, topic) in {
            "other run": (token, other.run_id, "default"),
            "other topic": (token, one.run_id, "progress"),
            "forged": (token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB"), one.run_id, "default"),
            "malformed": ("lgst1.nope", one.run_id, "default"),
        }.items():
            with pytest.raises(lg.StreamTokenRefused) as caught:
                await client.check_stream_token(tok, run, topic)
            refusals[name] = caught.value.reason
        assert refusals == {k: k for k in refusals}
        await env.advance("16m")
        with pytest.raises(lg.StreamTokenRefused, match="expired"):
            await client.check_stream_token(token, one.run_id, "default")
        with pytest.raises(lg.UnknownRun):
            await client.stream_token("run_nope")
        with pytest.raises(lg.InvalidArgument):
            await client.stream_token(one.run_id, ttl="30d")
        with pytest.raises(lg.InvalidArgument):
            await client.stream_token(one.run_id, topics=["bad topic"])


async def test_bad_chunks_and_topics_are_refused_before_anything_is_written(make_engine: Any) -> None:
    app = lg.App()

    @app.workflow(name="st.bad")
    async def bad(ctx: lg.Context, p: Job) -> list[str]:
        seen = []
        for chunk, topic in ((float("nan"), "default"), ("x", "no spaces"), (object(), "default")):
            try:
                await ctx.stream(chunk, topic=topic)
            except (lg.PayloadError, lg.InvalidArgument, TypeError) as exc:
                seen.append(type(exc).__name__)
        return seen

    async with make_engine(app) as engine:
        handle = await engine.start("st.bad", {})
        assert await handle.result(timeout=10) == ["UnstorableValue", "InvalidArgument", "TypeError"]
        assert await engine.client.store.read(store_streams.state, handle.run_id) == []


def test_chunk_json_shape() -> None:
    chunk = lg.StreamChunk(seq=2, topic="default", data="hi", step="answer#0", attempt=1)
    assert json.loads(json.dumps(chunk.to_dict())) == {
        "seq": 2,
        "topic": "default",
        "kind": "chunk",
        "data": "hi",
        "step": "answer#0",
        "attempt": 1,
    }
