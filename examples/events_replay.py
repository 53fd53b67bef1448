# events_replay.py: docs/events.md's replay: a trigger fixed after the fact gets last week's events again
import asyncio
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class Signup(BaseModel):
    user_id: str
    plan: str


user_signed_up = app.event("user.signed_up", payload=Signup)


@app.workflow(name="crm.welcome")
async def welcome(ctx: lg.Context, p: Signup) -> str:
    return f"welcome {p.user_id}"


# Say last week's crm.welcome mailed nobody (a bug, now fixed): the week's signups are offered to it again.
app.trigger(on=user_signed_up, workflow="crm.welcome", name="welcome")


async def main() -> None:
    async with lg.Engine(app, "sqlite:///replay.db") as engine:
        eid = await engine.publish(user_signed_up, None, {"user_id": "u1", "plan": "pro"})
        while not [d for d in await engine.deliveries(eid) if d.status != "pending"]:
            await asyncio.sleep(0.02)
        now = datetime.now(UTC)
        window = {"since": now - timedelta(days=7), "until": now}
        dry = await engine.replay_events("user.signed_up", trigger=["welcome"], **window)
        assert [r.status for r in dry] == ["would-replay"]  # a dry run: nothing started
        [done] = await engine.replay_events("user.signed_up", trigger=["welcome"], commit=True, **window)
        assert done.status == "started" and await engine.result(done.run_id or "", timeout=10) == "welcome u1"
        [again] = await engine.replay_events("user.signed_up", trigger=["welcome"], commit=True, **window)
        assert again.status == "skipped"  # the same window twice starts nothing new (force=True would)
    print("replay: ok")


if __name__ == "__main__":
    asyncio.run(main())
