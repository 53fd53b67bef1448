# agent_approval.py: docs/ai.md: an agent's answer streamed to the run, and a tool call a person approves
import asyncio
from collections.abc import AsyncIterator

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

import lockgate as lg
from lockgate.ai import LockgateAgent, ToolPolicy


class Ticket(BaseModel):
    order: str

async def support_model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
    returned = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not returned:                             # first turn: ask to refund the order
        yield {0: DeltaToolCall(name="refund", json_args='{"order": "o-7", "amount": 25}')}
        return
    for word in ["Your ", "refund ", "is ", str(returned[-1].content)]:
        yield word                               # the answer, as the model writes it

agent = Agent(FunctionModel(stream_function=support_model), name="support")

@agent.tool_plain(requires_approval=True)        # a person decides before it runs
def refund(order: str, amount: int) -> str:
    return f"on its way ({amount} EUR for {order})."

OUTBOX: list[str] = []                           # the links sent, as a mail server would hold them

def mail(text: str, secret: str) -> None:
    OUTBOX.append(secret)
    print(text)

async def send_link(ctx: lg.Context, call, token) -> None:   # in the body: the mail is a step of its own
    await ctx.step("send link", mail, f"approve {call.tool_name} {call.args}: POST {token.path}", token.token)

support = LockgateAgent(agent, stream_topic="answer", on_approval=send_link, approval_timeout="1d",
                        tools={"refund": ToolPolicy(retry=lg.Retry(max_attempts=1))})

app = lg.App()

@app.workflow(name="support.reply")
async def reply(ctx: lg.Context, t: Ticket) -> str:
    result = await support.run(ctx, f"Refund order {t.order}")
    return str(result.output)

async def main() -> None:
    async with lg.Engine(app, store="sqlite:///support.db") as engine:
        handle = await engine.start("support.reply", {"order": "o-7"})
        while (await engine.get_run(handle.run_id)).waiting_on != "token":
            await asyncio.sleep(0.05)            # parked on the approval token: no worker held
        await engine.client.complete_token(OUTBOX[0], {"approved": True})
        print(await handle.result(timeout=10))
        chunks = [c async for c in handle.stream("answer", after=0)]
        print("streamed:", "".join(c.data for c in lg.drop_resets(chunks)))

if __name__ == "__main__":
    asyncio.run(main())
