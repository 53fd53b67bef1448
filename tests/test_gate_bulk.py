"""Bulk verbs: ``cancel_many`` and ``replay_many`` are dry runs unless committed, bounded, and report per run."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv


class Job(BaseModel):
    n: int = 0


class Go(BaseModel):
    ok: bool = True


class Flaky(Exception):
    pass


def bulk_app(broken: dict[str, bool]) -> lg.App:
    app = lg.App()

    @app.workflow(name="bulk.held")
    async def held(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.n

    @app.workflow(name="bulk.parent")
    async def parent(ctx: lg.Context, p: Job) -> int:
        await ctx.start_child("bulk.held", {"n": p.n}, parent_close="cancel")
        await ctx.wait_for_signal("go", Go)
        return p.n

    def work(n: int) -> int:
        if broken["yes"]:
            raise Flaky(f"downstream is down for {n}")
        return n * 10

    @app.workflow(name="bulk.fails")
    async def fails(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("work", work, p.n, retry=lg.Retry(max_attempts=1)))

    return app


async def statuses(env: TestEnv, workflow: str) -> list[str]:
    runs = await env.engine.list_runs(workflow=workflow, limit=100)
    return sorted(r.status for r in runs)


async def cancel_reasons(env: TestEnv, run_id: str) -> list[Any]:
    return [ev.data for ev in await env.engine.events(run_id) if ev.type == "run-cancelled"]


async def held_runs(env: TestEnv, count: int, *, suspend: int = 0) -> list[str]:
    ids = [(await env.engine.start("bulk.held", {"n": i})).run_id or "" for i in range(count)]
    await env.settle()
    for run_id in ids[:suspend]:
        await env.engine.suspend(run_id, reason="looking")
    return ids


async def failed_runs(env: TestEnv, count: int) -> list[str]:
    ids = [(await env.engine.start("bulk.fails", {"n": i})).run_id or "" for i in range(count)]
    await env.settle()
    assert await statuses(env, "bulk.fails") == ["failed"] * count
    return ids


# -- cancel_many -------------------------------------------------------------------------------


async def test_cancel_many_is_a_dry_run_unless_committed(env_factory: Any) -> None:
    async with env_factory(bulk_app({"yes": False})) as env:
        ids = await held_runs(env, 3, suspend=1)
        preview = await env.engine.cancel_many(workflow="bulk.held", reason="bad deploy", limit=10)
        assert (preview.verb, preview.committed, preview.truncated) == ("cancel", False, False)
        assert sorted(i.run_id for i in preview.items) == sorted(ids)
        assert {i.outcome for i in preview.items} == {"would-act"}
        assert sorted(i.status for i in preview.items) == ["running", "running", "suspended"]
        assert await statuses(env, "bulk.held") == ["running", "running", "suspended"]
        assert [await cancel_reasons(env, r) for r in ids] == [[], [], []]


async def test_cancel_many_commits_running_and_suspended_runs_with_the_reason(env_factory: Any) -> None:
    async with env_factory(bulk_app({"yes": False})) as env:
        ids = await held_runs(env, 3, suspend=1)
        done = await env.engine.cancel_many(workflow="bulk.held", reason="bad deploy", limit=10, commit=True)
        assert (done.committed, done.truncated) == (True, False)
        assert {i.run_id: i.outcome for i in done.items} == {r: "succeeded" for r in ids}
        assert done.count("succeeded") == 3 and done.to_dict()["counts"]["succeeded"] == 3
        assert await statuses(env, "bulk.held") == ["cancelled"] * 3
        for run_id in ids:
            assert await cancel_reasons(env, run_id) == [{"reason": "bad deploy"}]
            assert (await env.engine.get_run(run_id)).error_message == "bad deploy"


async def test_cancel_many_reports_truncated_when_more_matched_than_the_limit(env_factory: Any) -> None:
    async with env_factory(bulk_app({"yes": False})) as env:
        ids = await held_runs(env, 5)
        first = await env.engine.cancel_many(workflow="bulk.held", reason="drain", limit=3, commit=True)
        assert first.truncated is True and len(first.items) == 3
        assert await statuses(env, "bulk.held") == ["cancelled"] * 3 + ["running"] * 2
        rest = await env.engine.cancel_many(workflow="bulk.held", reason="drain", limit=3, commit=True)
        assert rest.truncated is False and len(rest.items) == 2
        assert sorted(i.run_id for i in first.items + rest.items) == sorted(ids)
        exact = await env.engine.cancel_many(workflow="bulk.held", reason="drain", limit=3)
        assert (exact.truncated, exact.items) == (False, [])


async def test_cancel_many_filters_by_status_and_skips_what_it_cannot_cancel(env_factory: Any) -> None:
    async with env_factory(bulk_app({"yes": False})) as env:
        ids = await held_runs(env, 3, suspend=1)
        only = await env.engine.cancel_many(status="suspended", reason="stuck", limit=10, commit=True)
        assert [(i.run_id, i.outcome) for i in only.items] == [(ids[0], "succeeded")]
        assert await statuses(env, "bulk.held") == ["cancelled", "running", "running"]
        ended = await env.engine.cancel_many(status="cancelled", reason="again", limit=10, commit=True)
        assert [(i.run_id, i.outcome) for i in ended.items] == [(ids[0], "skipped")]
        assert ended.items[0].reason == "cancel does not apply to a cancelled run"
        assert await cancel_reasons(env, ids[0]) == [{"reason": "stuck"}]


async def test_cancel_many_reports_a_run_that_ended_before_its_turn_as_failed(env_factory: Any) -> None:
    """A parent cancelled first closes its child; the child's own cancel then fails, and says why."""
    async with env_factory(bulk_app({"yes": False})) as env:
        parent = await env.engine.start("bulk.parent", {"n": 1})
        await env.settle()
        (child,) = await env.engine.list_runs(workflow="bulk.held")
        result = await env.engine.cancel_many(reason="bad deploy", limit=10, commit=True)
        by_run = {i.run_id: i for i in result.items}
        assert by_run[parent.run_id or ""].outcome == "succeeded"
        assert by_run[child.id].outcome == "failed"
        assert "cancelled" in (by_run[child.id].reason or "")
        assert (await env.engine.get_run(child.id)).status == "cancelled"


async def test_cancel_many_needs_a_reason_and_a_limit(env_factory: Any) -> None:
    async with env_factory(bulk_app({"yes": False})) as env:
        await held_runs(env, 1)
        with pytest.raises(ValueError, match="reason"):
            await env.engine.cancel_many(reason="", limit=10)
        with pytest.raises(TypeError, match="reason"):
            await env.engine.cancel_many(limit=10)
        with pytest.raises(TypeError, match="limit"):
            await env.engine.cancel_many(reason="x")
        for bad in (0, -1, None, "10"):
            with pytest.raises(ValueError, match="limit"):
                await env.engine.cancel_many(reason="x", limit=bad)
        with pytest.raises(ValueError, match="unknown status"):
            await env.engine.cancel_many(reason="x", limit=1, status="sleeping")
        assert await statuses(env, "bulk.held") == ["running"]


# -- replay_many -------------------------------------------------------------------------------


async def test_replay_many_redrives_failed_runs_but_not_discarded_ones(env_factory: Any) -> None:
    broken = {"yes": True}
    async with env_factory(bulk_app(broken)) as env:
        ids = await failed_runs(env, 3)
        await env.engine.discard(ids[2])
        preview = await env.engine.replay_many(mode="redrive", limit=10)
        assert (preview.verb, preview.committed) == ("redrive", False)
        assert sorted((i.run_id, i.outcome) for i in preview.items) == sorted(
            [(ids[0], "would-act"), (ids[1], "would-act")]
        )
        assert await statuses(env, "bulk.fails") == ["failed"] * 3

        broken["yes"] = False
        done = await env.engine.replay_many(mode="redrive", limit=10, commit=True)
        assert sorted((i.run_id, i.outcome) for i in done.items) == sorted(
            [(ids[0], "succeeded"), (ids[1], "succeeded")]
        )
        await env.settle()
        assert [await env.engine.result(r) for r in ids[:2]] == [0, 10]
        assert (await env.engine.get_run(ids[2])).status == "failed"  # discarded: left alone
        assert len(await env.engine.list_runs(workflow="bulk.fails", limit=10)) == 3  # redrive makes no new run


async def test_replay_many_retries_failed_and_cancelled_runs_as_fresh_runs(env_factory: Any) -> None:
    broken = {"yes": True}
    async with env_factory(bulk_app(broken)) as env:
        failed = await failed_runs(env, 2)
        (cancelled,) = await held_runs(env, 1)
        await env.engine.cancel(cancelled, reason="oops")
        broken["yes"] = False
        done = await env.engine.replay_many(mode="retry", limit=10, commit=True)
        assert done.verb == "retry"
        assert sorted((i.run_id, i.outcome) for i in done.items) == sorted(
            [(failed[0], "succeeded"), (failed[1], "succeeded"), (cancelled, "succeeded")]
        )
        await env.settle()
        retries = [r for r in await env.engine.list_runs(limit=50) if r.retry_of is not None]
        assert sorted(r.retry_of or "" for r in retries) == sorted([*failed, cancelled])
        assert sorted(r.status for r in retries if r.workflow == "bulk.fails") == ["succeeded", "succeeded"]
        assert (await env.engine.get_run(failed[0])).status == "failed"  # the original stays as it ended


async def test_replay_many_redrive_skips_cancelled_runs_and_reports_truncated(env_factory: Any) -> None:
    async with env_factory(bulk_app({"yes": True})) as env:
        await failed_runs(env, 3)
        (cancelled,) = await held_runs(env, 1)
        await env.engine.cancel(cancelled, reason="oops")
        skipped = await env.engine.replay_many(mode="redrive", status="cancelled", limit=10, commit=True)
        assert [(i.run_id, i.outcome) for i in skipped.items] == [(cancelled, "skipped")]
        assert skipped.items[0].reason == "redrive does not apply to a cancelled run"
        capped = await env.engine.replay_many(mode="redrive", limit=2)
        assert capped.truncated is True and [i.outcome for i in capped.items] == ["would-act", "would-act"]


async def test_replay_many_reports_a_run_it_could_not_retry_as_failed(env_factory: Any, store_url: str) -> None:
    """A run whose workflow is no longer registered cannot be retried here: failed, with the reason."""
    async with env_factory(bulk_app({"yes": True})) as env:
        (run_id,) = await failed_runs(env, 1)
    renamed = lg.App()

    @renamed.workflow(name="bulk.other")
    async def other(ctx: lg.Context, p: Job) -> int:
        return p.n

    async with TestEnv(renamed, store=store_url) as env:
        result = await env.engine.replay_many(mode="retry", limit=10, commit=True)
        (item,) = result.items
        assert (item.run_id, item.outcome) == (run_id, "failed")
        assert "bulk.fails" in (item.reason or "")


async def test_replay_many_needs_a_mode_and_a_limit(env_factory: Any) -> None:
    async with env_factory(bulk_app({"yes": True})) as env:
        with pytest.raises(TypeError, match="mode"):
            await env.engine.replay_many(limit=10)
        with pytest.raises(ValueError, match="mode is required"):
            await env.engine.replay_many(mode="again", limit=10)
        with pytest.raises(TypeError, match="limit"):
            await env.engine.replay_many(mode="retry")
        with pytest.raises(ValueError, match="limit"):
            await env.engine.replay_many(mode="retry", limit=0)
