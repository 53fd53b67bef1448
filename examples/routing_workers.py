# routing_workers.py: worker routing and a version-aware rolling deploy (docs/routing.md), run
import asyncio

from pydantic import BaseModel

import lockgate as lg


class Clip(BaseModel):
    url: str


class Month(BaseModel):
    month: str


def old_code() -> lg.App:
    app = lg.App()

    @app.workflow(name="invoice", version="1")
    async def invoice(ctx: lg.Context, p: Month) -> str:
        await ctx.wait_for_signal("approved", Month)
        return f"invoice {p.month} by v1"

    return app


def new_code(tag: str) -> lg.App:
    app = lg.App()

    @app.workflow(name="transcode", runs_on=lg.Labels(gpu="a100"))
    async def transcode(ctx: lg.Context, p: Clip) -> str:
        return f"{p.url} encoded on {tag}"

    @app.workflow(name="upload")
    async def upload(ctx: lg.Context, p: Clip) -> str:
        child = await ctx.start_child("transcode", {"url": p.url})  # routed by its own workflow
        return f"{await ctx.wait_child(child)}, uploaded on {tag}"

    @app.workflow(name="invoice", version="2")  # not compatible with 1: old runs wait for old code
    async def invoice(ctx: lg.Context, p: Month) -> str:
        await ctx.wait_for_signal("approved", Month)
        return f"invoice {p.month} by v2"

    return app


async def main() -> None:
    url = "sqlite:///routing.db"
    async with lg.Engine(old_code(), url) as old:  # the old deploy: a run asleep in version 1
        march = await old.start("invoice", {"month": "2026-03"})
        await asyncio.sleep(0.2)

    web = lg.Engine(new_code("web"), url, unroutable_after="1s")
    gpu = lg.Engine(new_code("gpu-box"), url, labels="gpu=a100", workflows=["transcode"])
    async with web, gpu:
        print(await web.run("upload", {"url": "clip.mp4"}, timeout=30))
        await web.signal(march.run_id or "", "approved", {"month": "2026-03"})
        while (await web.get_run(march.run_id or "")).waiting_on != "version":  # no live code runs version 1
            await asyncio.sleep(0.1)
        print((await web.get_run(march.run_id or "")).waiting_version)
        dry = await web.migrate_version(workflow="invoice", from_version="1", to_version="2")
        print("would migrate", [item.run_id == march.run_id for item in dry.items])
        await web.migrate_version(workflow="invoice", from_version="1", to_version="2", commit=True)
        print(await web.result(march.run_id or "", timeout=30))  # declared safe: version 2 code takes it


if __name__ == "__main__":
    asyncio.run(main())
