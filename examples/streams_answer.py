# streams_answer.py: docs/streams.md: an LLM-style answer streamed to a page, read again after a network drop
import asyncio
import json
from collections.abc import AsyncIterator

import httpx
from pydantic import BaseModel

import lockgate as lg
from lockgate.http import bind_socket, create_app, serve_http

app = lg.App()
PAGE_ORIGIN = "http://127.0.0.1:8000"  # where your web app serves streams_page.html


class Question(BaseModel):
    text: str


async def fake_model(prompt: str) -> AsyncIterator[str]:
    """Stands in for an LLM client's streaming call: one token at a time."""
    for word in f"You asked: {prompt}. Durable answers arrive token by token.".split(" "):
        await asyncio.sleep(0.01)
        yield word + " "


@app.workflow(name="assistant.answer")
async def answer(ctx: lg.Context, q: Question) -> str:
    async def generate() -> str:
        text = ""
        async for token in fake_model(q.text):
            await ctx.stream(token)  # to the run's stream, as it comes
            text += token
        return text

    # a failed attempt is followed by a reset: readers drop its tokens, the retry streams anew
    return str(await ctx.step("generate", generate, retry=lg.Retry(max_attempts=3)))


async def read_like_a_browser(api: str, run_id: str, token: str) -> str:
    """What the page's EventSource does: read, lose the connection, reconnect with Last-Event-ID."""
    parts: list[dict[str, str]] = []
    last_id = None
    async with httpx.AsyncClient(timeout=10) as http:
        for attempt in (1, 2):
            headers = {} if last_id is None else {"Last-Event-ID": last_id}
            url = f"{api}/api/v1/runs/{run_id}/stream"
            async with http.stream("GET", url, params={"token": token}, headers=headers) as response:
                event = None
                async for line in response.aiter_lines():
                    if line.startswith("id: "):
                        last_id = line[4:]
                    elif line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event == "chunk":
                        parts.append(json.loads(line[6:]))
                        if attempt == 1 and len(parts) == 3:
                            break  # the network drops here: the next connection resumes after last_id
                    elif line.startswith("data: ") and event == "end":
                        print("run", json.loads(line[6:])["status"])
                        return "".join(p["data"] for p in parts)
    raise RuntimeError("the stream did not end")


async def main() -> None:
    limits = lg.StreamLimits(chunks=10_000, bytes=1_000_000)  # the most one run may stream
    async with lg.Engine(app, "sqlite:///streams.db", stream_limits=limits) as engine:
        sock = bind_socket("127.0.0.1", 0)
        api = f"http://127.0.0.1:{sock.getsockname()[1]}"
        web = create_app(engine.client, stream_origins=[PAGE_ORIGIN])  # CORS for the page, stream endpoint only
        server = asyncio.create_task(serve_http(web, "127.0.0.1", 0, sock))
        handle = await engine.start("assistant.answer", {"text": "what is a durable stream"})
        token = await engine.stream_token(handle.run_id, ttl="15m", topics=["default"])
        # your web app renders the page with api, the run id and this token: the browser reads this run only
        text = await read_like_a_browser(api, handle.run_id, token)
        assert text == await handle.result()
        print(text)
        chunks = [chunk async for chunk in handle.stream("default", after=0)]  # the same stream, in Python
        assert "".join(chunk.data for chunk in lg.drop_resets(chunks)) == text
        server.cancel()


if __name__ == "__main__":
    asyncio.run(main())
