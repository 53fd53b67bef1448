"""An encrypted workflow for crash tests (``python -m tests.apps.runner --app tests.apps.sealed:app``).

Its workers need ``LOCKGATE_ENCRYPTION_KEYS``; the steps are those of ``crashy``, so the
side-effect file counts what really ran.
"""

from __future__ import annotations

import lockgate as lg

from .crashy import Job, record, step_one, step_three, step_two

__all__ = ["app"]

app = lg.App("sealed-crash-tests")


@app.workflow(name="sealed.steps", encrypt_steps=True)
async def steps(ctx: lg.Context, p: Job) -> str:
    record(f"{p.tag}:body")
    a = await ctx.step("one", step_one, p.tag, input={"tag": p.tag})
    b = await ctx.step("two", step_two, p.tag)
    c = await ctx.step("three", step_three, p.tag)
    return f"{p.tag}:{a}{b}{c}"
