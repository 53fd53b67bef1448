# step_flow_tokens.py
import asyncio

from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

class Prompt(BaseModel):
    text: str
    max_tokens: int = 1_000

class Reply(BaseModel):
    text: str
    tokens: int                                   # the usage the provider reports

def estimate(text: str, max_tokens: int) -> int:
    return len(text) // 4 + max_tokens            # the prompt's tokens, roughly, and the most it may write

async def complete(text: str, max_tokens: int) -> Reply:
    await asyncio.sleep(0.01)                     # the provider: it wrote half of what it could
    return Reply(text=text[:20], tokens=len(text) // 4 + max_tokens // 2)

async def stream(ctx: lg.Context, text: str) -> str:
    chunks = [text[:10], text[10:20]]             # the deltas, as they arrive
    ctx.settle(len(text) // 4 + 300)              # the usage the stream's last event reported
    return "".join(chunks)

LLM = lg.FlowControl("llm", rate=10_000, period="1m", parallelism=4,
                     cost=estimate, settle=lambda reply: reply.tokens)

app = lg.App()

@app.workflow(name="summarise", flow_control=LLM)
async def summarise(ctx: lg.Context, p: Prompt) -> str:
    reply = await ctx.step("complete", complete, p.text, p.max_tokens)
    return reply.text

@app.workflow(name="chat", flow_control=LLM)
async def chat(ctx: lg.Context, p: Prompt) -> str:
    return await ctx.step("stream", stream, ctx, p.text, cost=estimate(p.text, p.max_tokens))

async def main() -> None:
    async with TestEnv(app) as env:               # lg.Engine(app, "postgresql://...") in production
        prompt = "x" * 4_000                      # 1,000 tokens: each call reserves 2,000
        handles = [await env.engine.start("summarise", {"text": prompt}) for _ in range(12)]
        handles += [await env.engine.start("chat", {"text": prompt}) for _ in range(3)]
        await env.settle()
        for minute in range(3):
            [key] = await env.engine.flow_keys("llm")
            print(f"minute {minute}: {key.started} calls, {key.units_reserved} tokens reserved, "
                  f"{key.units_settled} settled, {key.units_available} available, {key.waiting} waiting")
            await env.advance("1m")
        for h in handles:
            await env.engine.result(h.run_id, timeout=5)

if __name__ == "__main__":
    asyncio.run(main())
