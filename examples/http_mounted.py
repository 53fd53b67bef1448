# http_mounted.py: the API mounted in an application's own FastAPI app (docs/http.md)
import asyncio
import os
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

import lockgate as lg
from lockgate.http import AccessPolicy, create_app

os.environ.setdefault("LOCKGATE_TOKEN", "operate-secret")  # set by the deployment in real life
os.environ.setdefault("LOCKGATE_TOKEN_READ", "read-secret")

from shop import app as workflows  # your lg.App (here the README's shop)  # noqa: E402

OPERATE, READ = os.environ["LOCKGATE_TOKEN"], os.environ["LOCKGATE_TOKEN_READ"]
client = lg.Client(workflows, "sqlite:///shop.db")  # or postgresql://...

@asynccontextmanager
async def lifespan(_: FastAPI):
    async with client:
        yield

web = FastAPI(lifespan=lifespan)
web.mount("/lockgate", create_app(client, policy=AccessPolicy(token=OPERATE, read_token=READ)))
# the API is now under /lockgate/api/v1, its metrics at /lockgate/metrics, the dashboard at /lockgate/ui


async def main() -> None:
    async with lifespan(web):  # what the server does at boot: the client opens, then closes at the end
        transport = httpx.ASGITransport(app=web)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            headers = {"Authorization": f"Bearer {READ}"}
            print((await http.get("/lockgate/api/v1/healthz", headers=headers)).json())
            print((await http.get("/lockgate/api/v1/runs", headers=headers)).status_code)
            refused = await http.post("/lockgate/api/v1/runs/cancel-many", headers=headers, json={"reason": "x"})
            print("the read token cannot act:", refused.status_code)


if __name__ == "__main__":
    asyncio.run(main())
