"""Starting runs: handles, identity, payload and name refusals, blocking runs, clients."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg


class Edit(BaseModel):
    row_id: str
    edited_at: int


class EditV2(BaseModel):
    row_id: str
    edited_at: int
    editor: str  # required: payloads stored by the previous model lack it


class Go(BaseModel):
    go: bool = True


class Bad(Exception):
    pass


def make_app(calls: list[str]) -> lg.App:
    app = lg.App()

    @app.workflow(name="tour.narration", idempotency_key=lambda p: f"tour:{p.row_id}:{p.edited_at}")
    async def narrate(ctx: lg.Context, p: Edit) -> str:
        calls.append(p.row_id)
        return f"narrated {p.row_id}@{p.edited_at}"

    @app.workflow(name="tour.plain")
    async def plain(ctx: lg.Context, p: Edit) -> str:
        calls.append(p.row_id)
        return f"plain {p.row_id}"

    @app.workflow(name="tour.gated")
    async def gated(ctx: lg.Context, p: Edit) -> str:
        await ctx.wait_for_signal("go", Go)
        return "released"

    @app.workflow(name="tour.broken")
    async def broken(ctx: lg.Context, p: Edit) -> str:
        raise Bad(f"cannot narrate {p.row_id}")

    return app


async def test_start_returns_a_started_handle(make_engine: Any) -> None:
    calls: list[str] = []
    async with make_engine(make_app(calls)) as engine:
        handle = await engine.start("tour.plain", {"row_id": "r1", "edited_at": 1})
        assert handle.status == "started"
        assert handle.workflow == "tour.plain"
        assert handle.run_id is not None and handle.run_id.startswith("run_")
        assert handle.ticket and handle.deferral is None and handle.retry_after is None
        assert await handle.result(timeout=10) == "plain r1"
        run = await engine.get_run(handle.run_id)
        assert (run.status, run.ticket, run.payload) == ("succeeded", handle.ticket, {"row_id": "r1", "edited_at": 1})


async def test_workflow_key_makes_a_spent_identity_existing(make_engine: Any) -> None:
    calls: list[str] = []
    async with make_engine(make_app(calls)) as engine:
        first = await engine.start("tour.narration", {"row_id": "r1", "edited_at": 5})
        again = await engine.start("tour.narration", {"row_id": "r1", "edited_at": 5})
        assert (first.status, again.status) == ("started", "existing")
        assert again.run_id == first.run_id
        assert again.ticket != first.ticket
        assert await engine.result(first.run_id, timeout=10) == "narrated r1@5"

        after = await engine.start("tour.narration", {"row_id": "r1", "edited_at": 5})
        assert (after.status, after.run_id) == ("existing", first.run_id)
        assert await engine.result(after.run_id, timeout=10) == "narrated r1@5"
        assert await after.result(timeout=10) == "narrated r1@5"

        other = await engine.start("tour.narration", {"row_id": "r1", "edited_at": 6})
        assert other.status == "started" and other.run_id != first.run_id
        assert await other.result(timeout=10) == "narrated r1@6"
        assert calls == ["r1", "r1"]
        runs = await engine.list_runs(workflow="tour.narration")
        assert sorted(str(r.idempotency_key) for r in runs) == ["tour:r1:5", "tour:r1:6"]


async def test_explicit_key_makes_a_spent_identity_existing(make_engine: Any) -> None:
    calls: list[str] = []
    async with make_engine(make_app(calls)) as engine:
        first = await engine.start("tour.plain", {"row_id": "r1", "edited_at": 1}, idempotency_key="k-1")
        assert await first.result(timeout=10) == "plain r1"
        # same key, different payload: the identity wins, the old run and result come back
        again = await engine.start("tour.plain", {"row_id": "r2", "edited_at": 2}, idempotency_key="k-1")
        assert (again.status, again.run_id) == ("existing", first.run_id)
        assert await engine.result(again.run_id, timeout=10) == "plain r1"
        # keys are per workflow, and an explicit key overrides the workflow's callback
        elsewhere = await engine.start("tour.narration", {"row_id": "r1", "edited_at": 1}, idempotency_key="k-1")
        assert elsewhere.status == "started" and elsewhere.run_id != first.run_id
        assert (await engine.get_run(elsewhere.run_id)).idempotency_key == "k-1"
        assert await engine.run("tour.plain", {"row_id": "r9", "edited_at": 9}, idempotency_key="k-1") == "plain r1"
        await elsewhere.result(timeout=10)
        assert calls == ["r1", "r1"]


async def test_spent_identity_of_a_failed_run_is_existing(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        first = await engine.start("tour.broken", {"row_id": "r1", "edited_at": 1}, idempotency_key="once")
        with pytest.raises(lg.RunFailed):
            await first.result(timeout=10)
        again = await engine.start("tour.broken", {"row_id": "r1", "edited_at": 1}, idempotency_key="once")
        assert (again.status, again.run_id) == ("existing", first.run_id)
        with pytest.raises(lg.RunFailed):
            await engine.result(again.run_id, timeout=10)


async def test_no_key_starts_a_fresh_run_each_time(make_engine: Any) -> None:
    calls: list[str] = []
    async with make_engine(make_app(calls)) as engine:
        handles = [await engine.start("tour.plain", {"row_id": "r1", "edited_at": 1}) for _ in range(3)]
        assert [h.status for h in handles] == ["started"] * 3
        assert len({h.run_id for h in handles}) == 3
        for handle in handles:
            assert await handle.result(timeout=10) == "plain r1"
        assert calls == ["r1"] * 3


async def test_payload_error_names_missing_and_invalid_fields_and_writes_nothing(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        with pytest.raises(lg.PayloadError) as info:
            await engine.start("tour.plain", {"edited_at": "yesterday"})
        err = info.value
        assert err.missing == ["row_id"]
        assert err.invalid == ["edited_at"]
        assert "missing row_id" in str(err) and "invalid edited_at" in str(err)
        assert "tour.plain" in str(err)

        with pytest.raises(lg.PayloadError) as info:
            await engine.start("tour.plain", "not json")
        assert info.value.invalid == ["(root)"]
        with pytest.raises(lg.PayloadError):
            await engine.start("tour.plain", None)
        with pytest.raises(lg.PayloadError, match="idempotency_key"):
            await engine.start("tour.plain", {"row_id": "r", "edited_at": 1}, idempotency_key="")
        with pytest.raises(lg.PayloadError):
            await engine.run("tour.plain", {"row_id": 5})
        assert await engine.list_runs() == []


async def test_unknown_workflow_lists_the_registered_names_and_writes_nothing(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        with pytest.raises(lg.UnknownWorkflow) as info:
            await engine.start("tour.narate", {"row_id": "r1", "edited_at": 1})
        err = info.value
        assert err.name == "tour.narate"
        assert err.registered == ["tour.broken", "tour.gated", "tour.narration", "tour.plain"]
        assert "tour.narration" in str(err) and "tour.narate" in str(err)

        async def not_registered(ctx: lg.Context, p: Edit) -> None:
            return None

        with pytest.raises(lg.UnknownWorkflow, match="not_registered"):
            await engine.start(not_registered, {"row_id": "r1", "edited_at": 1})
        with pytest.raises(lg.UnknownWorkflow):
            await engine.run("nope", {})
        assert await engine.list_runs() == []


async def test_run_returns_the_result_or_raises_run_failed(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        assert await engine.run("tour.plain", {"row_id": "r3", "edited_at": 1}, timeout=10) == "plain r3"
        with pytest.raises(lg.RunFailed) as info:
            await engine.run("tour.broken", {"row_id": "r4", "edited_at": 1}, timeout=10)
        err = info.value
        assert err.error_tag == "Bad"
        assert err.error_message == "cannot narrate r4"
        run = await engine.get_run(err.run_id)
        assert (run.status, run.error_tag) == ("failed", "Bad")


async def test_start_with_wait_returns_after_the_run_ends(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        handle = await engine.start("tour.plain", {"row_id": "r5", "edited_at": 1}, wait=True, timeout=10)
        assert (await engine.get_run(handle.run_id)).status == "succeeded"
        with pytest.raises(lg.RunFailed):
            await engine.start("tour.broken", {"row_id": "r6", "edited_at": 1}, wait=True, timeout=10)


async def test_result_times_out_on_a_live_run(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        handle = await engine.start("tour.gated", {"row_id": "r1", "edited_at": 1})
        with pytest.raises(lg.ResultTimeout):
            await engine.result(handle.run_id, timeout=0.2)
        with pytest.raises(lg.UnknownRun):
            await engine.result("run_missing", timeout=1)


async def test_client_starts_and_engine_executes(store_url: str, make_engine: Any) -> None:
    calls: list[str] = []
    app = make_app(calls)
    async with lg.Client(app, store_url, poll_interval=0.05) as client:
        handle = await client.start("tour.narration", {"row_id": "r1", "edited_at": 1})
        assert handle.status == "started" and handle.run_id is not None
        await asyncio.sleep(0.3)  # a window in which nothing may pick the run up: a client executes nothing
        run = await client.get_run(handle.run_id)
        assert (run.status, run.owner, run.entries) == ("running", None, 0)
        assert calls == []

        async with make_engine(app) as engine:
            assert await client.result(handle.run_id, timeout=10) == "narrated r1@1"
            again = await client.start("tour.narration", {"row_id": "r1", "edited_at": 1})
            assert (again.status, again.run_id) == ("existing", handle.run_id)
            assert await engine.result(handle.run_id, timeout=10) == "narrated r1@1"
        assert calls == ["r1"]


async def test_max_concurrent_runs_bounds_what_one_engine_executes(make_engine: Any) -> None:
    app = lg.App()
    entered: list[str] = []
    release = threading.Event()

    def hold(row_id: str) -> str:
        entered.append(row_id)
        release.wait(10)
        return row_id

    @app.workflow(name="held")
    async def held(ctx: lg.Context, p: Edit) -> str:
        return str(await ctx.step("hold", hold, p.row_id))

    try:
        async with make_engine(app, max_concurrent_runs=1) as engine:
            first = await engine.start("held", {"row_id": "a", "edited_at": 1})
            second = await engine.start("held", {"row_id": "b", "edited_at": 1})
            deadline = asyncio.get_running_loop().time() + 10
            while not entered:
                assert asyncio.get_running_loop().time() < deadline, "the first run never started"
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # a window in which the full engine must not take the second run
            assert entered == ["a"] and engine.executing == [first.run_id]
            release.set()
            assert await second.result(timeout=10) == "b"
            assert await first.result(timeout=10) == "a"
    finally:
        release.set()
    assert entered == ["a", "b"]


async def test_a_run_whose_payload_no_longer_fits_is_retried_then_parked(env_factory: Any) -> None:
    before, after = lg.App(), lg.App()

    @before.workflow(name="tour.plain")
    async def plain(ctx: lg.Context, p: Edit) -> str:
        return p.row_id

    @after.workflow(name="tour.plain")
    async def plain_v2(ctx: lg.Context, p: EditV2) -> str:
        return p.editor

    async with env_factory(after, max_reclaims=2, lease="10s") as env:
        async with lg.Client(before, env.store_url, clock=env.clock) as client:
            handle = await client.start("tour.plain", {"row_id": "r1", "edited_at": 1})
        assert handle.run_id is not None
        await env.settle()
        run = await env.engine.get_run(handle.run_id)
        assert (run.status, run.owner, run.entries) == ("running", None, 1)  # let go, not held forever
        assert run.wake_at is not None and run.wake_at.timestamp() == env.clock.now() + 10
        await env.advance("10s")
        assert (await env.engine.get_run(handle.run_id)).entries == 2
        await env.advance("10s")
        run = await env.engine.get_run(handle.run_id)
    assert (run.status, run.error_tag) == ("suspended", "WorkflowCrashLooped")


async def test_a_burst_of_starts_in_one_commit_keeps_every_identity_and_decision(store_url: str) -> None:
    """Hundreds of concurrent starts share group commits (written as multi-row statements where the
    store can): each keeps its own payload, ticket and ledger decision, and a key spent twice in one
    burst gives one run."""
    async with lg.Client(make_app([]), store_url) as client:
        plain = [client.start("tour.plain", {"row_id": f"p{i}", "edited_at": i}) for i in range(300)]
        keyed = [client.start("tour.narration", {"row_id": f"k{i % 40}", "edited_at": 1}) for i in range(80)]
        handles = await asyncio.gather(*plain, *keyed)
        plain_handles, keyed_handles = handles[:300], handles[300:]
        assert [h.status for h in plain_handles] == ["started"] * 300
        assert len({h.run_id for h in plain_handles}) == 300
        for i, h in enumerate(plain_handles):
            assert h.run_id is not None
            run = await client.get_run(h.run_id)
            assert (run.status, run.ticket, run.payload) == ("running", h.ticket, {"row_id": f"p{i}", "edited_at": i})
        by_key: dict[int, list[lg.RunHandle]] = {}
        for i, h in enumerate(keyed_handles):
            by_key.setdefault(i % 40, []).append(h)
        for pair in by_key.values():
            assert [h.status for h in pair] == ["started", "existing"]
            assert pair[0].run_id == pair[1].run_id
        assert len(await client.list_runs(workflow="tour.narration", limit=100)) == 40
        for h in handles:
            trace = await client.trace(h.ticket)
            assert (trace.outcome, trace.run_id) == (h.status if h.status == "existing" else "admitted", h.run_id)
