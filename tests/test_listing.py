"""Listing runs on both stores: every filter against a plain reading of all runs, cursors while runs
are added, text search (bounded, and never through a seal no key opens), children, runs per hour."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.crypto import Keyring, generate_key
from lockgate.inspect import Inspector, RunFilter
from lockgate.inspect import listing as listing_module
from lockgate.records import RunInfo
from lockgate.testing import TestEnv

KEY = generate_key()


class Job(BaseModel):
    note: str = ""
    fail: bool = False
    kids: int = 0


def refuse(note: str) -> None:
    raise ValueError(f"cannot do {note}")


async def _body(ctx: lg.Context, p: Job) -> str:
    for n in range(p.kids):
        await ctx.start_child("beta", {"note": f"kid {n} of {p.note}"})
    if p.fail:
        await ctx.step("refuse", refuse, p.note, retry=lg.Retry(max_attempts=1))
    return p.note


def make_app(*, secret: bool = False) -> lg.App:
    app = lg.App()
    app.workflow(name="alpha")(_body)
    app.workflow(name="beta")(_body)
    if secret:
        app.workflow(name="secret", encrypt_steps=True)(_body)
    return app


def inspector(env: TestEnv, keys: list[str] | None = None) -> Inspector:
    keyring = env.engine.keyring if keys is None else Keyring.load(keys)
    return Inspector(env.engine.store, env.engine.app, env.clock, keyring=keyring)


async def populate(env: TestEnv) -> list[RunInfo]:
    """Runs of two workflows in every ending, a minute apart, one with children; every run, newest first."""
    engine = env.engine
    for n, (workflow, payload) in enumerate(
        [
            ("alpha", {"note": "Apple pie"}),
            ("beta", {"note": "banana", "fail": True}),
            ("alpha", {"note": "cherry", "fail": True}),
            ("beta", {"note": "date"}),
            ("alpha", {"note": "parent", "kids": 2}),
            ("alpha", {"note": "elder APPLE", "fail": True}),
        ]
    ):
        await engine.start(workflow, payload)
        await env.settle()
        env.clock.advance(60 if n != 2 else 7200)  # an hour gap in the middle: since/until cut there
    await env.settle()
    everything = await inspector(env).runs(limit=1000)
    assert len(everything) == 8
    return everything


def matches(run: RunInfo, where: RunFilter) -> bool:
    """``where`` read plainly, one run at a time: what the store's queries must agree with."""
    text = where.text.casefold() if where.text else None
    blob = " ".join(str(v) for v in (run.raw["payload"], run.error_tag, run.error_message) if v).casefold()
    return (
        (where.workflow is None or run.workflow == where.workflow)
        and (not where.statuses or run.status in where.statuses)
        and (where.source is None or run.source == where.source)
        and (where.parent_id is None or run.parent_id == where.parent_id)
        and (where.since is None or run.created_at >= where.since)
        and (where.until is None or run.created_at < where.until)
        and (where.id_prefix is None or run.id.startswith(where.id_prefix))
        and (text is None or text in blob)
        and (not where.dead_letter or (run.status == "failed" and not run.discarded))
    )


async def test_every_filter_agrees_with_a_plain_reading(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        everything = await populate(env)
        insp = inspector(env)
        parent = next(r for r in everything if r.payload.get("note") == "parent")
        discarded = next(r for r in everything if r.payload.get("note") == "banana")
        assert await env.engine.discard(discarded.id) is True
        everything = await insp.runs(limit=1000)
        middle = sorted(r.created_at for r in everything)[3]
        long_prefix = everything[2].id[: len("run_") + 10]
        filters = [
            RunFilter(),
            RunFilter(workflow="alpha"),
            RunFilter(workflow="beta", statuses=("succeeded",)),
            RunFilter(statuses=("failed",)),
            RunFilter(statuses=("failed", "succeeded")),
            RunFilter(workflow="alpha", statuses=("failed", "running", "succeeded")),
            RunFilter(statuses=("running",)),
            RunFilter(source=f"child:{parent.id}"),
            RunFilter(source=everything[-1].source),
            RunFilter(parent_id=parent.id),
            RunFilter(parent_id=parent.id, statuses=("succeeded",)),
            RunFilter(since=middle),
            RunFilter(until=middle),
            RunFilter(since=middle - timedelta(seconds=1), until=middle + timedelta(seconds=1)),
            RunFilter(workflow="alpha", since=middle),
            RunFilter(id_prefix=long_prefix),
            RunFilter(id_prefix=everything[0].id),
            RunFilter(id_prefix="run_"),
            RunFilter(id_prefix="run_0", workflow="beta"),
            RunFilter(text="apple"),
            RunFilter(text="APPLE", workflow="alpha", statuses=("failed",)),
            RunFilter(text="cannot do"),  # in the error
            RunFilter(text="ValueError"),  # the error tag
            RunFilter(text="kid 1"),
            RunFilter(text="nowhere at all"),
            RunFilter(dead_letter=True),
            RunFilter(dead_letter=True, workflow="alpha"),
            RunFilter(dead_letter=True, statuses=("failed",), since=middle),
            RunFilter(dead_letter=True, source=everything[-1].source),
        ]
        narrowed = 0
        for where in filters:
            expected = [r.id for r in everything if matches(r, where)]
            narrowed += 0 < len(expected) < len(everything)
            for limit in (1, 2, 100):
                got: list[str] = []
                cursor = None
                while True:
                    page = await insp.run_page(where, cursor=cursor, limit=limit)
                    assert len(page.items) <= limit
                    got += [r.id for r in page.items]
                    if page.next_cursor is None:
                        break
                    cursor = page.next_cursor
                assert got == expected, (where, limit)
        assert narrowed >= 20  # the filters above keep some runs and leave others out
        assert {r.id for r in await insp.runs(dead_letter=True)} == {
            r.id for r in everything if r.status == "failed" and r.id != discarded.id
        }
        # the same filters through the engine's own listing
        assert [r.id for r in await env.engine.list_runs(statuses=("failed",), text="apple")] == [
            r.id for r in everything if matches(r, RunFilter(statuses=("failed",), text="apple"))
        ]


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"statuses": ("lost",)}, "unknown status 'lost'"),
        ({"dead_letter": True, "statuses": ("running",)}, "dead letters are failed runs"),
        ({"since": datetime(2030, 1, 1)}, "since must be a timezone-aware datetime"),
        ({"since": datetime(2030, 1, 1, tzinfo=UTC), "until": datetime(2029, 1, 1, tzinfo=UTC)}, "before until"),
        ({"id_prefix": ""}, "id_prefix must not be empty"),
        ({"text": ""}, "text must not be empty"),
    ],
)
async def test_a_filter_no_run_can_match_is_refused(
    env_factory: Callable[..., TestEnv], fields: dict[str, Any], needle: str
) -> None:
    async with env_factory(make_app()) as env:
        with pytest.raises(lg.InvalidArgument, match=needle):
            await inspector(env).run_page(RunFilter(**fields))
        with pytest.raises(lg.InvalidArgument, match="not one a page of runs gave"):
            await inspector(env).run_page(cursor="not a cursor!")
        with pytest.raises(lg.InvalidArgument, match="cursor or before"):
            await inspector(env).runs(cursor="x", before="y")


async def test_pages_stay_put_while_runs_are_added(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine, insp = env.engine, inspector(env)
        for n in range(7):
            await engine.start("alpha" if n % 2 else "beta", {"note": f"old {n}", "fail": n % 3 == 0})
            if n % 2:
                env.clock.advance(1)  # pairs share a creation time: the id orders them
        await env.settle()
        for where in (RunFilter(), RunFilter(statuses=("failed", "succeeded")), RunFilter(text="old")):
            before = [r.id for r in await insp.runs(limit=1000) if matches(r, where)]
            seen: list[str] = []
            added: list[str] = []
            page = await insp.run_page(where, limit=2)
            seen += [r.id for r in page.items]
            while page.next_cursor is not None:
                for n in range(3):  # newer runs land above the cursor, some at its very instant
                    handle = await engine.start("alpha", {"note": f"new old {n}", "fail": n == 1})
                    assert handle.run_id is not None
                    added.append(handle.run_id)
                await env.settle()
                page = await insp.run_page(where, cursor=page.next_cursor, limit=2)
                seen += [r.id for r in page.items]
            assert seen == before and len(set(seen)) == len(seen)
            assert not set(added) & set(seen)
            env.clock.advance(1)


async def test_text_search_opens_only_what_the_keyring_opens(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(secret=True), encryption_keys=[KEY]) as env:
        sealed = await env.engine.start("secret", {"note": "hidden treasure", "fail": True})
        plain = await env.engine.start("alpha", {"note": "open treasure"})
        await env.settle()
        keyed, keyless = inspector(env), inspector(env, [])
        assert {r.id for r in await keyed.runs(text="treasure")} == {sealed.run_id, plain.run_id}
        assert [r.id for r in await keyed.runs(text="cannot do hidden")] == [sealed.run_id]  # its error, opened
        assert [r.id for r in await keyless.runs(text="treasure")] == [plain.run_id]
        for needle in ("encrypted", "sealed", "hidden"):  # neither the stand-in nor the envelope is searched
            assert await keyless.runs(text=needle) == []


async def test_text_search_reads_a_bounded_window_and_continues_below_it(
    env_factory: Callable[..., TestEnv], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing_module, "TEXT_WINDOW", 3)
    monkeypatch.setattr(listing_module, "_CHUNK", 2)
    async with env_factory(make_app()) as env:
        for n in range(8):
            await env.engine.start("alpha", {"note": "needle" if n in (0, 1) else "hay"})
            env.clock.advance(1)
        await env.settle()
        insp = inspector(env)
        first = await insp.run_page(RunFilter(text="needle"), limit=5)
        assert (first.items, first.searched) == ([], 3) and first.next_cursor is not None
        found: list[str] = []
        page = first
        while page.next_cursor is not None:
            page = await insp.run_page(RunFilter(text="needle"), cursor=page.next_cursor, limit=5)
            assert page.searched <= 3
            found += [r.payload["note"] for r in page.items]
        assert found == ["needle", "needle"]


async def test_children_of_a_run(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        parent = await env.engine.start("alpha", {"note": "p", "kids": 3})
        await env.settle()
        assert parent.run_id is not None
        insp = inspector(env)
        page = await insp.children(parent.run_id, limit=2)
        rest = await insp.children(parent.run_id, cursor=page.next_cursor, limit=2)
        kids = page.items + rest.items
        assert rest.next_cursor is None and len(kids) == 3
        assert {k.parent_id for k in kids} == {parent.run_id}
        assert [k.id for k in kids] == [r.id for r in (await insp.run_detail(parent.run_id)).children]
        assert (await insp.children(kids[0].id)).items == []
        with pytest.raises(lg.UnknownRun):
            await insp.children("run_nope")


async def test_runs_per_hour(env_factory: Callable[..., TestEnv]) -> None:
    start = 1_800_000_000.0 - 1_800_000_000.0 % 3600 + 600  # ten minutes into an hour
    async with env_factory(make_app(), start=start) as env:
        engine = env.engine
        await engine.start("alpha", {"note": "long ago"})
        await env.advance("5h")
        await engine.start("alpha", {"note": "a"})
        await engine.start("beta", {"note": "b", "fail": True})
        await env.advance("1h")
        for _ in range(3):
            await engine.start("alpha", {"note": "c"})
        await env.settle()
        stats = await inspector(env).stats(hours=3)
        hourly = stats.hourly
        assert hourly is not None and hourly.hours == 3
        assert hourly.start == datetime.fromtimestamp(start - 600 + 4 * 3600, UTC)
        by_name = {h.workflow: h for h in hourly.workflows}
        assert by_name["alpha"].started == [0, 1, 3] and by_name["alpha"].failed == [0, 0, 0]
        assert by_name["beta"].started == [0, 1, 0] and by_name["beta"].failed == [0, 1, 0]
        assert by_name["beta"].statuses["failed"] == 1 and by_name["alpha"].total == 4
        assert hourly.totals.started == [0, 2, 3] and hourly.totals.total == 5
        assert stats.totals.runs["total"] == 6  # the counts of every run stay whole
        only = (await inspector(env).stats("beta", hours=1)).hourly
        assert only is not None and [h.workflow for h in only.workflows] == []  # beta ran an hour ago
        for bad in (0, 10_000):
            with pytest.raises(lg.InvalidArgument, match="hours"):
                await inspector(env).stats(hours=bad)


async def test_follow_shows_the_tail_then_each_new_run_once(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        for n in range(3):
            await env.engine.start("alpha", {"note": f"old {n}"})
            env.clock.advance(1)
        await env.settle()
        follow = inspector(env).follow_runs(RunFilter(workflow="alpha"), tail=2, poll=1.0)
        assert [(await anext(follow)).payload["note"] for _ in range(2)] == ["old 1", "old 2"]
        await env.engine.start("beta", {"note": "another workflow"})
        new = [await env.engine.start("alpha", {"note": f"new {n}"}) for n in range(2)]
        await env.settle()
        shown = []
        for _ in new:
            waiting = asyncio.ensure_future(anext(follow))
            deadline = asyncio.get_running_loop().time() + 10
            while not waiting.done():  # the follow sleeps on the test clock: move it on
                assert asyncio.get_running_loop().time() < deadline
                env.clock.advance(1)
                await asyncio.sleep(0.01)
            shown.append((await waiting).id)
        assert shown == [h.run_id for h in new]
        await follow.aclose()
        with pytest.raises(lg.InvalidArgument):
            await anext(inspector(env).follow_runs(tail=-1))
