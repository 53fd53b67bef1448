"""A retry is a start like any other: it passes the gate, so limits and windows count it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import lockgate as lg

from .apps.gate import flow_of, wait_runs


class Job(BaseModel):
    tenant: str
    fail: bool = False


class Go(BaseModel):
    ok: bool = True


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="limited", concurrency=lg.Concurrency(limit=1, key=lambda p: p.tenant))
    async def limited(ctx: lg.Context, p: Job) -> str:
        if p.fail:
            raise RuntimeError("boom")
        await ctx.wait_for_signal("go", Go)
        return p.tenant

    return app


async def test_a_retry_waits_for_a_slot_like_any_start(env_factory: Any) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        failed = await engine.start("limited", {"tenant": "t", "fail": True})
        await wait_runs(engine, "limited", status="failed")
        holder = await engine.start("limited", {"tenant": "t"})
        assert holder.status == "started"

        retry = await engine.retry(failed.run_id, payload_override={"tenant": "t"})
        assert (retry.status, retry.run_id, retry.deferral and retry.deferral.mode) == ("queued", None, "concurrency")
        assert (await flow_of(engine, "limited", "t")).queued == 1

        await env.settle()
        await engine.signal(holder.run_id, "go", {})
        assert await engine.result(holder.run_id, timeout=10) == "t"
        await env.engine.drainer.tick()
        await env.settle()
        trace = await engine.trace(retry.ticket)
        assert trace.run_id is not None
        fresh = await engine.get_run(trace.run_id)
        assert (fresh.retry_of, fresh.status) == (failed.run_id, "running")
        events = [e for e in await engine.events(failed.run_id) if e.type == "run-retried"]
        assert events and events[0].data["ticket"] == retry.ticket


async def test_a_redriven_run_gets_its_finish_budget_again(env_factory: Any) -> None:
    app = lg.App()
    attempts: list[int] = []

    def flaky() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("provider down")
        return len(attempts)

    @app.workflow(name="bounded", timeouts=lg.Timeouts(finish="10m"))
    async def bounded(ctx: lg.Context, p: Go) -> int:
        value = int(await ctx.step("call", flaky))
        await ctx.wait_for_signal("go", Go)
        return value

    async with env_factory(app) as env:
        engine = env.engine
        handle = await engine.start("bounded", {})
        await wait_runs(engine, "bounded", status="failed")
        await env.advance("1h")  # long past the first deadline
        await engine.redrive(handle.run_id)
        await env.advance("5m")
        await env.engine.drainer.tick()
        run = await engine.get_run(handle.run_id)
        assert (run.status, run.waiting_on) == ("running", "signal")  # not failed by the old deadline
        await env.advance("6m")
        await env.engine.drainer.tick()
        await env.settle()
        run = await engine.get_run(handle.run_id)
        assert (run.status, run.error_tag) == ("failed", "FinishTimeout")  # the new budget is enforced
