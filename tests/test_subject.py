"""A start's identity is kept with the run and inherited; its authority is asked again on every attempt."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import lockgate as lg
from lockgate.origin import SYSTEM_SUBJECT

from .test_cancel_on import until

app = lg.App("subject-tests")
seen: list[tuple[str, str, frozenset[str]]] = []


class Job(BaseModel):
    tag: str


class Key(BaseModel):
    tag: str


done = app.event("subject.done", key=Key, payload=Key)


@app.workflow(name="subj.parent")
async def parent(ctx: lg.Context, p: Job) -> str:
    seen.append((p.tag, ctx.subject.id, ctx.scopes))
    await ctx.sleep("nap", "1h")
    seen.append((p.tag, ctx.subject.id, ctx.scopes))
    child = await ctx.start_child("subj.child", {"tag": f"{p.tag}-child"})
    await ctx.publish(done, {"tag": p.tag}, {"tag": p.tag})
    return str(await ctx.wait_child(child))


@app.workflow(name="subj.child")
async def child(ctx: lg.Context, p: Job) -> str:
    seen.append((p.tag, ctx.subject.id, ctx.scopes))
    return ctx.subject.tenant_id or ""


@app.workflow(name="subj.triggered")
async def triggered(ctx: lg.Context, p: Key) -> str:
    seen.append((f"{p.tag}-triggered", ctx.subject.id, ctx.scopes))
    return ctx.subject.id


app.trigger(on=done, workflow="subj.triggered")


async def test_identity_is_persisted_and_inherited_and_authority_re_resolved(env_factory: Any) -> None:
    seen.clear()
    granted = {"u1": {"tours:write"}}

    def resolve(subject: lg.Subject) -> set[str]:
        return set(granted.get(subject.id, set()))

    who = lg.Subject(id="u1", tenant_id="t1", metadata={"team": "a"})
    async with env_factory(app, resolve_scopes=resolve) as env:
        engine = env.engine
        handle = await engine.start("subj.parent", {"tag": "p"}, subject=who, trace_id="tr-1")
        await env.settle()
        run = await engine.get_run(handle.run_id)
        assert (run.source, run.trace_id) == ("api", "tr-1")
        granted["u1"] = set()  # revoked while the run sleeps: the resume does not assert it
        await env.advance("2h")
        assert await engine.result(handle.run_id, timeout=10) == "t1"

        async def ended() -> bool:
            runs = await engine.list_runs(workflow="subj.triggered")
            return bool(runs) and runs[0].status == "succeeded"

        await until(ended)
        triggered = await engine.list_runs(workflow="subj.triggered")
        assert triggered[0].trace_id == "tr-1"
    assert seen[0] == ("p", "u1", frozenset({"tours:write"}))
    assert seen[1] == ("p", "u1", frozenset())
    assert ("p-child", "u1", frozenset()) in seen
    assert ("p-triggered", "u1", frozenset()) in seen


async def test_a_run_without_a_starter_runs_as_the_system_subject(env_factory: Any) -> None:
    seen.clear()
    asked: list[str] = []

    def resolve(subject: lg.Subject) -> set[str]:
        asked.append(subject.id)
        return {"everything"}

    async with env_factory(app, resolve_scopes=resolve) as env:
        handle = await env.engine.start("subj.child", {"tag": "c"})
        assert await env.engine.result(handle.run_id, timeout=10) == ""
    assert seen == [("c", SYSTEM_SUBJECT.id, frozenset())]
    assert asked == []
