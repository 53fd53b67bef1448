# observability_traces.py: traces of a run started in a web request, sent over OTLP to a small
# collector this example runs itself (docs/observability.md)
import asyncio
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from fastapi import FastAPI
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import BaseModel

import lockgate as lg

RECEIVED: list[str] = []  # span names, as the collector got them


class Collector(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                RECEIVED.extend(span.name for span in scope.spans)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


collector = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
threading.Thread(target=collector.serve_forever, daemon=True).start()
os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{collector.server_port}"  # set by your deployment

from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

app = lg.App()
store = "sqlite:///traced.db"


class Order(BaseModel):
    order_id: str


def take_payment(order_id: str) -> str:
    return f"paid {order_id}"


@app.workflow(name="charge")
async def charge(ctx: lg.Context, p: Order) -> str:
    return await ctx.step("take payment", take_payment, p.order_id)  # type: ignore[no-any-return]


provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)

web = FastAPI()
client = lg.Client(app, store)

# the web process: its request span becomes the parent of the run's spans
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor  # noqa: E402
FastAPIInstrumentor.instrument_app(web)

@web.post("/orders")
async def create_order(order: Order):
    handle = await client.start("charge", order)   # records the request's traceparent
    return {"run_id": handle.run_id}


async def main() -> None:
    async with lg.Engine(app, store) as engine:   # traces from here on
        ...
        async with client:
            transport = httpx.ASGITransport(app=web)
            async with httpx.AsyncClient(transport=transport, base_url="http://shop") as http:
                placed = (await http.post("/orders", json={"order_id": "o-1"})).json()
        print(await engine.result(placed["run_id"], timeout=30))
        run = await engine.get_run(placed["run_id"])
    provider.force_flush()
    print("the run continues the request's trace:", run.trace_id)
    print("spans the collector received:", sorted(set(RECEIVED)))
    assert {"run charge", "step take payment", "POST /orders"} <= set(RECEIVED)
    provider.shutdown()
    collector.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
