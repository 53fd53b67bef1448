# operations_bulk.py: the bulk verbs and retention settings of docs/operations.md
import asyncio

from pydantic import BaseModel

import lockgate as lg

app = lg.App()
store = "sqlite:///operations.db"


class Edit(BaseModel):
    n: int


class Go(BaseModel):
    ok: bool = True


def flaky(n: int) -> int:
    raise ValueError(f"bad deploy broke edit {n}")


@app.workflow(name="tour.narration")
async def narrate(ctx: lg.Context, p: Edit) -> int:
    await ctx.wait_for_signal("go", Go)
    return p.n


@app.workflow(name="tour.render")
async def render(ctx: lg.Context, p: Edit) -> int:
    return await ctx.step("render", flaky, p.n)  # type: ignore[no-any-return]


async def main() -> None:
    lg.Engine(app, store, retention="7d")    # keep ended runs a week
    lg.Engine(app, store, retention=None)    # keep everything
    async with lg.Engine(app, store) as engine:
        for n in range(5):
            await engine.start("tour.narration", {"n": n})
            await engine.start("tour.render", {"n": n})
        for run in await engine.list_runs(workflow="tour.render"):
            try:
                await engine.result(run.id, timeout=30)
            except lg.RunFailed:
                pass
        preview = await engine.cancel_many(workflow="tour.narration", reason="bad deploy", limit=500)
        done = await engine.cancel_many(workflow="tour.narration", reason="bad deploy", limit=500, commit=True)
        await engine.replay_many(status="failed", mode="redrive", limit=200, commit=True)
        print(len(preview.items), "would be cancelled;", len(done.items), "cancelled")


if __name__ == "__main__":
    asyncio.run(main())
