"""A 3-step booking with compensation, for the compensation tests (in process and in worker subprocesses).

Every step and compensation appends ``<tag>:<what>`` to ``LOCKGATE_TEST_EFFECTS`` (crashy.record), so
a test counts what really ran across processes. ``fail`` names the step that fails ("flight", "hotel",
"payment"); ``hold`` names a step or compensation that waits for the flag ``<tag>.<hold>`` first (to kill
the process there, or cancel meanwhile); ``wait_paid`` makes the body wait for the signal ``paid`` after
the payment; ``broken`` names compensations that fail until the flag ``<tag>.fixed`` is raised.
"""

from __future__ import annotations

from pydantic import BaseModel

import lockgate as lg

from .crashy import flag, record, wait_flag

__all__ = ["Booking", "app"]

app = lg.App("booking-tests")


class Booking(BaseModel):
    tag: str
    fail: str = ""
    hold: str = ""
    wait_paid: bool = False
    broken: list[str] = []


class Paid(BaseModel):
    ok: bool = True


class Declined(Exception):
    pass


class ReleaseFailed(Exception):
    pass


def act(p: dict[str, object], what: str) -> str:
    tag = str(p["tag"])
    record(f"{tag}:{what}")
    if p["hold"] == what:
        wait_flag(f"{tag}.{what}")
    if p["fail"] == what:
        raise Declined(f"{what} declined")
    return f"{what}-ok"


def undo(p: dict[str, object], what: str) -> None:
    tag = str(p["tag"])
    record(f"{tag}:{what}")
    if p["hold"] == what:
        wait_flag(f"{tag}.{what}")
    if what in p["broken"] and not flag(f"{tag}.fixed").exists():  # type: ignore[operator]
        raise ReleaseFailed(f"{what}: the provider refused")


@app.workflow(name="booking.trip")
async def trip(ctx: lg.Context, p: Booking) -> str:
    data = p.model_dump()
    async with ctx.compensations() as undo_list:
        flight = await ctx.step("reserve-flight", act, data, "flight")
        undo_list.add("release-flight", undo, data, "release-flight", retry=lg.Retry(max_attempts=2, base_delay="10ms"))
        hotel = await ctx.step("reserve-hotel", act, data, "hotel")
        undo_list.add("release-hotel", undo, data, "release-hotel", retry=lg.Retry(max_attempts=2, base_delay="10ms"))
        paid = await ctx.step("charge", act, data, "payment")
        if p.wait_paid:
            await ctx.wait_for_signal("paid", Paid)
        await ctx.step("confirm", act, data, "confirm")
    return f"{flight},{hotel},{paid}"


@app.workflow(name="booking.suspending", suspend_on_failure=True)
async def suspending(ctx: lg.Context, p: Booking) -> str:
    """The booking, suspended instead of failed when its error escapes (after its block undid its work)."""
    return await trip(ctx, p)


@app.workflow(name="booking.nested")
async def nested(ctx: lg.Context, p: Booking) -> str:
    """A trip (inner block) inside an outer block that holds a seat map: the outer undo runs after the inner one."""
    data = p.model_dump()
    async with ctx.compensations() as outer:
        await ctx.step("hold-seats", act, data, "seats")
        outer.add("release-seats", undo, data, "release-seats")
        return await trip(ctx, p)


@app.workflow(name="booking.late")
async def late(ctx: lg.Context, p: Booking) -> str:
    """Registers a compensation after its block exited: a typed error, at the call."""
    data = p.model_dump()
    async with ctx.compensations() as undo_list:
        await ctx.step("reserve-flight", act, data, "flight")
    undo_list.add("release-flight", undo, data, "release-flight")
    return "unreachable"
