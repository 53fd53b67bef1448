# agent_narration.py: docs/ai.md: 1,000 row edits debounced into narrations under one token budget
import asyncio

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import lockgate as lg
from lockgate.ai import LockgateAgent
from lockgate.testing import TestEnv


class Edit(BaseModel):
    row_id: str
    edited_at: int

HISTORY: dict[str, list[int]] = {}               # the rows' edits, as the tool reads them
calls = {"made": 0}

def provider(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    calls["made"] += 1                           # the provider, offline: a tool call, then the narration
    if calls["made"] == 37:                      # a scripted 429: "try again in 20 seconds"
        raise ModelHTTPError(429, "gpt-narrator", {"error": "rate limited"}, retry_after=20)
    row = str(messages[0].parts[-1].content).split()[-1]
    if not any(m.kind == "response" for m in messages):
        return ModelResponse(parts=[ToolCallPart("edits_of", {"row_id": row})],
                             usage=RequestUsage(input_tokens=1_200, output_tokens=40))
    return ModelResponse(parts=[TextPart(f"Row {row} was edited {len(HISTORY[row])} times.")],
                         usage=RequestUsage(input_tokens=1_400, output_tokens=350))

agent = Agent(FunctionModel(provider), name="narrator", deps_type=dict,
              instructions="Narrate a row's edits in one sentence.", model_settings={"max_tokens": 500})

@agent.tool
def edits_of(run: RunContext[dict], row_id: str) -> list[int]:
    return run.deps[row_id]                      # a tool call is a step of its own

OPENAI = lg.FlowControl("openai", rate=60_000, period="1m", parallelism=10, cost=1_500)
narrator = LockgateAgent(agent, flow_control=OPENAI,
                         estimate=lambda messages, settings: 1_500)  # prompt and max_tokens, roughly

app = lg.App()

@app.workflow(name="tour.narration", debounce=lg.Debounce(key=lambda p: p.row_id, period="15m", timeout="1h"))
async def narrate(ctx: lg.Context, p: Edit) -> str:
    result = await narrator.run(ctx, f"Narrate row {p.row_id}", deps=HISTORY)
    return str(result.output)

async def main() -> None:
    async with TestEnv(app) as env:              # the controllable clock; lg.Engine(app, ...) in production
        for i in range(1_000):                   # 1,000 edits of 100 rows fold into 100 narrations
            row = f"row-{i % 100}"
            HISTORY.setdefault(row, []).append(i)
            await env.engine.start("tour.narration", {"row_id": row, "edited_at": i})
        await env.advance("14m")
        for minute in range(7):                  # at 15m the debounce settles: 100 runs start
            before = calls["made"]
            await env.advance("1m")
            [key] = await env.engine.flow_keys("openai")  # the trailing minute of the key's window
            print(f"minute {minute}: {calls['made'] - before} calls made, {key.units_reserved} tokens reserved, "
                  f"{key.units_settled} settled, {key.waiting} waiting, paused={key.paused}")
        done = await env.engine.list_runs(workflow="tour.narration", status="succeeded", limit=1_000)
        print(f"{len(done)} narrations, {calls['made']} provider calls (one refused with a 429)")

if __name__ == "__main__":
    asyncio.run(main())
