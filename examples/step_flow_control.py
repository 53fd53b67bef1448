# step_flow_control.py: the fragments of docs/step-flow-control.md, run together
import asyncio

from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class Order(BaseModel):
    id: str


class Doc(BaseModel):
    id: str
    text: str


class Ask(BaseModel):
    prompt: str


class Write(BaseModel):
    tenant: str
    body: str


def prepare(order_id: str) -> str:
    return f"prepared {order_id}"


def charge(order_id: str) -> str:
    return f"charged {order_id}"


def notify(order_id: str) -> str:
    return f"notified {order_id}"


@app.workflow(name="orders.fulfil", flow_control=lg.FlowControl("orders", parallelism=20))
async def fulfil(ctx: lg.Context, order: Order) -> str:
    await ctx.step("prepare", prepare, order.id)                          # under the run's key
    await ctx.step("charge customer", charge, order.id,
                   flow_control=lg.FlowControl("payment-provider", parallelism=3))  # this key only
    await ctx.step("notify", notify, order.id, flow_control=None)          # exempt
    return order.id


class OrderBatch(BaseModel):
    ids: list[str]


@app.workflow(name="orders.batch")
async def batch(ctx: lg.Context, p: OrderBatch) -> list[str]:
    child = await ctx.start_child("orders.fulfil", {"id": p.ids[0]},
                                  flow_control=lg.FlowControl("bulk", parallelism=2))  # that child's run
    return [await ctx.wait_child(child)]


class Response:
    """What the provider answers: a 429 (retry after 10 ms) or the text."""

    def __init__(self, status_code: int, headers: dict[str, str], text: str) -> None:
        self.status_code, self.headers, self.text = status_code, headers, text


class Provider:
    def __init__(self) -> None:
        self.calls = 0

    async def post(self, *args: object) -> Response:
        self.calls += 1
        if self.calls == 2:  # the second call (the "ask" run) meets a busy provider
            return Response(429, {"retry-after": "0.01"}, "")
        return Response(200, {}, "spam")


client = Provider()


async def call_llm(prompt: str) -> str:
    response = await client.post(...)
    if response.status_code == 429:
        raise lg.RetryAfter(float(response.headers["retry-after"]))
    return response.text


def save(doc_id: str, label: str) -> str:
    return f"{doc_id}: {label}"


def write_crm(p: Write) -> str:
    return f"{p.tenant}: {p.body}"


LLM = lg.FlowControl("llm-provider", rate=500, period="1m", parallelism=20)

@app.workflow(name="summarise", flow_control=LLM)
async def summarise(ctx: lg.Context, p: Doc) -> str: ...

@app.workflow(name="classify")
async def classify(ctx: lg.Context, p: Doc) -> str:
    label = await ctx.step("classify", call_llm, p.text, flow_control=LLM)   # only this step
    await ctx.step("store", save, p.id, label)                               # not limited
    return label


SEARCH = lg.FlowControl("search-api", rate=10, period="1s", burst=5)  # 6 at once, then 1 per 100 ms


@app.workflow(name="search", flow_control=SEARCH)
async def search(ctx: lg.Context, p: Ask) -> str:
    return await ctx.step("search", call_llm, p.prompt)


@app.workflow(name="ask")
async def ask(ctx: lg.Context, p: Ask) -> str:
    prompt = p.prompt
    await ctx.step("ask", call_llm, prompt, retry=lg.Retry(max_attempts=5),
               flow_control=lg.FlowControl("llm-provider", parallelism=20))
    return "answered"


@app.workflow(name="crm.write")
async def crm_write(ctx: lg.Context, p: Write) -> str:
    await ctx.rate_limit("crm-writes", limit=100, period="1m", key=p.tenant)
    await ctx.step("write", write_crm, p)
    return p.tenant


async def main() -> None:
    async with lg.Engine(app, "sqlite:///step_flow_control.db") as engine:
        await engine.start("orders.fulfil", {"id": "o-1"},
                   flow_control=lg.FlowControl("vip", rate=100, period="1m"))
        [run] = await engine.list_runs(workflow="orders.fulfil")
        print(await engine.result(run.id, timeout=30))
        print(await engine.run("orders.batch", {"ids": ["o-2"]}, timeout=30))
        print(await engine.run("classify", {"id": "d-1", "text": "buy now"}, timeout=30))
        print(await engine.run("ask", {"prompt": "is it spam?"}, timeout=30))  # a 429 first: retried
        print(await engine.run("crm.write", {"tenant": "acme", "body": "hello"}, timeout=30))
        print(await engine.run("search", {"prompt": "lockgate"}, timeout=30))
        for key in await engine.flow_keys():
            print(key.key, key.rate, key.period, key.parallelism)


if __name__ == "__main__":
    asyncio.run(main())
