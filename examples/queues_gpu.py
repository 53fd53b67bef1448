# queues_gpu.py: the durable queue of docs/queues.md, run
import asyncio

from pydantic import BaseModel

import lockgate as lg


class Image(BaseModel):
    url: str
    urgency: int = 0


class Video(BaseModel):
    url: str
    urgency: int = 0


class Album(BaseModel):
    urls: list[str]


def resize(url: str) -> str:
    return f"thumb of {url}"


def encode(url: str) -> str:
    return f"h264 of {url}"


app = lg.App()
gpu = app.queue("gpu", concurrency=4, rate_limit=(100, "1m"), priority=lambda p: p.urgency)

@app.workflow(name="thumbnail", queue=gpu)
async def thumbnail(ctx: lg.Context, p: Image) -> str:
    return await ctx.step("resize", resize, p.url)  # type: ignore[no-any-return]

@app.workflow(name="transcode", queue=gpu)
async def transcode(ctx: lg.Context, p: Video) -> str:
    return await ctx.step("encode", encode, p.url)  # type: ignore[no-any-return]

@app.workflow(name="import")
async def import_album(ctx: lg.Context, p: Album) -> list[str]:
    handles = [await ctx.enqueue(gpu, "thumbnail", {"url": u, "urgency": 0}) for u in p.urls]
    return [await ctx.wait_child(h) for h in handles]          # durable: the parent parks meanwhile


async def main() -> None:
    async with lg.Engine(app, "sqlite:///queues.db") as engine:
        album = await engine.run("import", {"urls": [f"img-{n}.jpg" for n in range(6)]}, timeout=30)
        print(album)
        # from outside a workflow
        await engine.enqueue(gpu, "transcode", {"url": "...", "urgency": 5})
        [video] = await engine.list_runs(workflow="transcode")
        print(await engine.result(video.id, timeout=30))


if __name__ == "__main__":
    asyncio.run(main())
