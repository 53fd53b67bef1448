# doctor_check.py: the doctor of docs/doctor.md, read from Python
import asyncio
import json

from pydantic import BaseModel

import lockgate as lg
from lockgate.inspect import DoctorSettings, connect

app = lg.App()


class Job(BaseModel):
    n: int


@app.workflow(name="jobs.run")
async def run_job(ctx: lg.Context, p: Job) -> int:
    return p.n


def page_someone(report: dict[str, object]) -> None:
    print("paging:", json.dumps(report)[:120])


async def main() -> None:
    async with lg.Engine(app, "sqlite:///lockgate.db") as engine:
        await engine.run("jobs.run", {"n": 1}, timeout=30)
    async with connect("sqlite:///lockgate.db", app) as inspector:
        report = await inspector.doctor(DoctorSettings(stall_after=600))
        if report.needs_person:
            page_someone(report.to_dict())
        print("needs a person:", report.needs_person)


if __name__ == "__main__":
    asyncio.run(main())
