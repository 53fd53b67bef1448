# workflows_steps.py: declarations, typed results, steps, retries, children (docs/workflows.md)
import asyncio
from typing import Any

from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class CloseMonth(BaseModel):
    org_id: str
    month: str


class Summary(BaseModel):
    total: int


class Approval(BaseModel):
    approved: bool


class Limit(BaseModel):
    value: int


class Item(BaseModel):
    i: int


class User(BaseModel):
    user_id: str


class Report(BaseModel):
    id: str


class ProviderDown(Exception):
    pass


def alert(info: Any) -> None:
    print("stalled:", info)


@app.workflow(
    name="billing.close-month",          # default: module.qualname
    idempotency_key=lambda p: f"close:{p.org_id}:{p.month}",
    version="2", compatible_with=["1"], patches=["skip-empty-ledgers"],
    suspend_on_failure=True,
    stall_after="2h", on_stalled=alert,
    signals={"approval": Approval}, updates={"set-limit": Limit},
)
async def close_month(ctx: lg.Context, p: CloseMonth) -> Summary: ...


@app.workflow(name="check")
async def check(ctx: lg.Context, p: Item) -> bool:
    return None                                   # not a bool  # type: ignore[return-value]


calls = {"fetch": 0}


def fetch_profile(user_id: str) -> dict[str, str]:
    calls["fetch"] += 1
    if calls["fetch"] < 3:
        raise ProviderDown("try again")
    return {"user": user_id, "name": "Ada"}


def f(n: int) -> int:
    return n * 10


@app.workflow(name="profile")
async def profile(ctx: lg.Context, p: User) -> list[Any]:
    user_id = p.user_id
    value = await ctx.step("fetch", fetch_profile, user_id, retry=lg.Retry(max_attempts=5), input={"user": user_id})
    a, b = await asyncio.gather(ctx.step("left", f, 1), ctx.step("right", f, 2))   # really parallel
    return [value, a, b]


def policy() -> None:
    lg.Retry(
        max_attempts=5,                  # every attempt, including the first (no retry: 1, the default)
        strategy="exponential",          # "exponential" | "fixed" | "linear"
        base_delay="500ms", max_delay="30s", factor=2,
        jitter=True,                     # full jitter: uniform in [0, delay]
        max_elapsed="5m",                # a budget across attempts
        retryable=(ProviderDown,),       # classes, or a predicate; anything else fails at once
        respect_retry_after=True,        # an error's retry_after (s) / retry_after_ms is the next delay
    )


def render_pdf(report_id: str) -> str:
    return f"{report_id}.pdf"


@app.workflow(name="report.render")
async def render_report(ctx: lg.Context, p: Report) -> str:
    return await ctx.step("render", render_pdf, p.id)  # type: ignore[no-any-return]


@app.workflow(name="render", singleton=lg.Singleton(key=lambda p: p.id, mode="skip"))
async def render(ctx: lg.Context, p: Report) -> str:
    return await ctx.step("render", render_pdf, p.id)  # type: ignore[no-any-return]


class Depth(BaseModel):
    n: int


@app.workflow(name="tree", concurrency=lg.Concurrency(limit=1))
async def tree(ctx: lg.Context, p: Depth) -> int:
    if p.n == 0:
        return 1
    child = await ctx.start_child("tree", {"n": p.n - 1})   # "queued": the parent holds the slot
    assert child.status == "queued"
    return 1 + await ctx.wait_child(child)                  # type: ignore[no-any-return]  # the parent parks: the child takes it


@app.workflow(name="report")
async def report(ctx: lg.Context, p: Report) -> list[Any]:
    child = await ctx.start_child("report.render", {"id": p.id}, parent_close="cancel")
    pdf = await ctx.wait_child(child)     # the child's result, or RunFailed / RunCancelled raised
    found: list[Any] = [pdf]
    h = await ctx.start_child("render", {"id": p.id})
    h.status          # "started" | "existing" | "queued" | "dropped" | "skipped"
    try:
        pdf = await ctx.wait_child(h)               # waits through the gate, then for the run
        found.append(pdf)
    except lg.ChildNotStarted as exc:               # it never became a run of its own
        exc.outcome   # "dropped" | "skipped" | "collapsed" | "batched" | "expired" | "cancelled"
        exc.run_id    # the singleton incumbent, for "skipped"
        found.append(exc.outcome)
    return found


async def main() -> None:
    policy()
    engine = lg.Engine(app, "sqlite:///app.db", step_input_limit=4096)
    async with engine:
        try:
            await engine.run("check", {"i": 1})
        except lg.RunFailed as exc:
            assert isinstance(exc.__cause__, lg.ResultTypeError)   # expected bool, actual None
        handle = await engine.start("profile", {"user_id": "u-1"})
        run_id = handle.run_id
        print(await engine.result(run_id, timeout=30))
        ...
        attempt = (await engine.attempts(run_id))[0]
        attempt.input_truncated      # True: attempt.input is the head of the JSON text
        attempt.input_size           # bytes of the whole input
        print("first attempt:", attempt.status, attempt.input)
        print(await engine.run("report", {"id": "r-1"}, timeout=30))
        tall = await engine.start("tree", {"n": 3})
        print("tree of", await engine.result(tall.run_id, timeout=30))   # 4: each level waited for the slot


if __name__ == "__main__":
    asyncio.run(main())
