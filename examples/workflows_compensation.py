# workflows_compensation.py: undo what succeeded when a later step fails (docs/workflows.md)
import asyncio

from pydantic import BaseModel

import lockgate as lg

app = lg.App()
held: dict[str, str] = {}  # what the providers hold for us (a real flow calls their APIs)


class Trip(BaseModel):
    trip_id: str
    card: str


class Confirmed(BaseModel):
    ok: bool


class PaymentDeclined(Exception):
    pass


def reserve_flight(trip_id: str) -> str:
    held[f"flight-{trip_id}"] = "reserved"
    return f"flight-{trip_id}"


def reserve_hotel(trip_id: str) -> str:
    held[f"hotel-{trip_id}"] = "reserved"
    return f"hotel-{trip_id}"


def release(booking_id: str) -> None:
    held.pop(booking_id, None)  # idempotent: a retry after a lost answer finds it gone


def charge(card: str, amount: int) -> str:
    if card == "declined":
        raise PaymentDeclined(f"card refused for {amount}")
    held[f"charge-{card}"] = "charged"
    return f"charge-{card}"


def refund(charge_id: str) -> None:
    held.pop(charge_id, None)


@app.workflow(name="trip.book")
async def book(ctx: lg.Context, p: Trip) -> str:
    async with ctx.compensations() as undo:
        flight_id = await ctx.step("reserve-flight", reserve_flight, p.trip_id)
        undo.add("release-flight", release, flight_id)
        hotel_id = await ctx.step("reserve-hotel", reserve_hotel, p.trip_id)
        undo.add("release-hotel", release, hotel_id, retry=lg.Retry(max_attempts=5))
        charge_id = await ctx.step("charge", charge, p.card, 420)
        undo.add("refund", refund, charge_id)
        await ctx.wait_for_signal("confirmed", Confirmed, timeout="1h")
    return charge_id  # type: ignore[no-any-return]


async def main() -> None:
    async with lg.Engine(app, "sqlite:///trips.db") as engine:
        failed = await engine.start("trip.book", {"trip_id": "t-1", "card": "declined"})
        try:
            await engine.result(failed.run_id, timeout=30)
        except lg.RunFailed as exc:
            print("failed:", exc.error_tag)                  # PaymentDeclined, after both releases
        steps = [s.name for s in await engine.steps(failed.run_id) if s.kind == "compensation"]
        print("undone:", steps)                              # ['release-hotel', 'release-flight']

        waiting = await engine.start("trip.book", {"trip_id": "t-2", "card": "visa"})
        while (await engine.get_run(waiting.run_id)).waiting_on != "signal":
            await asyncio.sleep(0.05)
        await engine.cancel(waiting.run_id, "customer left", compensate=True)
        try:
            await engine.result(waiting.run_id, timeout=30)
        except lg.RunCancelled:
            print("cancelled, still held:", held)            # {}: refunded, then both released
    assert held == {}


if __name__ == "__main__":
    asyncio.run(main())
