# step_flow_worked.py
import asyncio

from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

class Topic(BaseModel):
    topic: str

app = lg.App()

async def call_api(topic: str, part: int) -> str:
    await asyncio.sleep(0.01)                 # the external API
    return f"{topic}:{part}"

@app.workflow(name="research")
async def research(ctx: lg.Context, p: Topic) -> list[str]:
    return [await ctx.step(f"step-{i}", call_api, p.topic, i) for i in (1, 2, 3)]

async def main() -> None:
    async with TestEnv(app) as env:           # lg.Engine(app, "sqlite:///research.db") in production
        handles = [
            await env.engine.start("research", {"topic": f"t{n}"},
                                   flow_control=lg.FlowControl("fw_example", rate=3, period="1m", parallelism=7))
            for n in range(10)
        ]
        for minute in range(1, 11):
            await env.advance("1m")
            [key] = await env.engine.flow_keys("fw_example")
            print(f"minute {minute}: {key.started} started in the window, {key.waiting} waiting")
        for h in handles:
            print(await env.engine.result(h.run_id, timeout=5))

if __name__ == "__main__":
    asyncio.run(main())
