"""A three-turn agent run whose third model request waits for a flag, for the SIGKILL test.

The function model and the tool record each call they really make in the effects file, so the
test counts what a worker killed mid-run and the one that resumed it called between them.
"""

from __future__ import annotations

import asyncio
import os
import time

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import lockgate as lg
from lockgate.ai import LockgateAgent

from .crashy import flag, record

__all__ = ["app"]

app = lg.App("agent-crash-tests")


async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    turn = sum(1 for m in messages if m.kind == "response")
    record(f"model:{turn}")
    usage = RequestUsage(input_tokens=100, output_tokens=10)
    if turn < 2:
        return ModelResponse(parts=[ToolCallPart("lookup", {"row": f"r{turn}"})], usage=usage)
    while not flag("release").exists():  # the test kills the worker here, then lets the next one through
        await asyncio.sleep(0.02)
    return ModelResponse(parts=[TextPart("narrated")], usage=usage)


agent = Agent(FunctionModel(respond), name="crash_narrator")


@agent.tool_plain
def lookup(row: str) -> str:
    record(f"tool:{row}")
    return f"{row} edited"


narrator = LockgateAgent(agent, flow_control=lg.FlowControl("llm", rate=100_000, period="1m", cost=1))


class Ask(BaseModel):
    text: str


@app.workflow(name="agentcrash.narrate")
async def narrate(ctx: lg.Context, p: Ask) -> str:
    result = await narrator.run(ctx, p.text)
    return str(result.output)


# -- a 429 seen by one process pauses the key for every process --------------------------------------


async def pressured(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    try:  # the first request anywhere is refused: the provider asks for 3 seconds
        os.close(os.open(flag("429-sent"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        record(f"call {time.time():.3f} {os.getpid()}")
        await asyncio.sleep(0.1)
        return ModelResponse(parts=[TextPart("ok")], usage=RequestUsage(input_tokens=50, output_tokens=5))
    record(f"429 {time.time():.3f} {os.getpid()}")
    raise ModelHTTPError(429, "gpt", {"error": "rate limited"}, retry_after=3)


pressure = LockgateAgent(
    Agent(FunctionModel(pressured), name="pressure_agent"),
    flow_control=lg.FlowControl("pressure", rate=100_000, period="1m", parallelism=3, cost=1),
)


@app.workflow(name="agentcrash.pressure")
async def under_pressure(ctx: lg.Context, p: Ask) -> str:
    result = await pressure.run(ctx, p.text)
    return str(result.output)
