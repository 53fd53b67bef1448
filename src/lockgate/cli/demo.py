"""``lockgate demo``: run the example app (``lockgate.demo_app``) and watch it live.

The demo starts a few runs on an engine in this process, sends the signal and the update
they wait for, offers bursts of starts to gated workflows (debounce, concurrency, rate
limit), publishes ``demo.order.cancelled`` once the reminder sleeps (its ``cancel_on``
cancels it), and shows a table of runs until every run has ended, every event's
deliveries are settled (each checkout's ``demo.order.paid`` starts a ``demo.fulfil``),
nothing waits at the gate and the app's schedule (``demo.heartbeat``, every two seconds)
has fired; then a table of the gate's decisions and a summary of the events. On a
terminal the table updates in place; otherwise each change is printed as one line, so
logs and CI read well.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .. import demo_app
from ..app import App
from ..clock import to_datetime
from ..dashboard import DASHBOARD_PREFIX
from ..events import DeliveryRecord, EventRecord
from ..facades import Engine
from ..http import DEFAULT_BIND
from ..ids import short_id
from ..inspect import TERMINAL, FiringInfo, FlowKeyRow, FlowRow, Inspector
from ..records import EventInfo
from ..store import open_store
from .common import DurationType, check_store, inspector_of, open_inspector, run_async, sqlite_path
from .fit import FitTable
from .groups import cli
from .output import display_url, make_console, short, status_text, when

__all__ = ["RunRow", "run_demo"]

DEFAULT_DEMO_STORE = "sqlite:///lockgate-demo.db"
DASHBOARD_URL = f"http://{DEFAULT_BIND}{DASHBOARD_PREFIX}/runs"
_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class RunRow:
    """One line of the live table."""

    workflow: str
    run_id: str
    status: str
    waiting_on: str | None
    steps_done: int
    retries: int
    last_event: str
    error: str | None = None  # the run's error message (a cancellation's reason)

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL


Published = tuple[EventRecord, list[DeliveryRecord]]
"""A domain event and what became of it for each trigger."""


@dataclass
class Outcome:
    rows: list[RunRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    flow: list[FlowRow] = field(default_factory=list)  # the gate's decisions on the demo's gated starts
    collapsed_ticket: str | None = None  # a debounced edit folded into another, for ``workflows why``
    firings: list[FiringInfo] = field(default_factory=list)  # the heartbeat schedule's, oldest first
    tenant_firings: list[FiringInfo] = field(default_factory=list)  # the runtime schedule's, oldest first
    published: list[Published] = field(default_factory=list)  # the domain events of this demo, oldest first
    charge_waits: list[float] = field(default_factory=list)  # seconds each checkout's charge waited for its key
    model: FlowKeyRow | None = None  # the narration's token-weighted key, as the demo ends
    created: bool = False  # the demo made its database (it did not exist, or was reset)


# The gated workflows and the bursts of starts the demo offers them.
GATED: list[tuple[Any, list[dict[str, Any]]]] = [
    (demo_app.narrate, [{"row": "row-7", "text": f"draft {n}"} for n in range(1, 21)]),
    (demo_app.print_label, [{"printer": "printer-1", "order_id": f"B-{n}"} for n in range(2001, 2006)]),
    (demo_app.send_sms, [{"customer": "acme", "message": f"order update {n}"} for n in range(1, 6)]),
]
GATED_NAMES = tuple(wf.__lockgate_workflow__ for wf, _ in GATED)

HEARTBEAT = demo_app.heartbeat.__lockgate_workflow__  # type: ignore[attr-defined]
"""The demo's schedule: declared on its workflow, so it bears the workflow's name."""

TENANT_SCHEDULE = "heartbeat:tenant-4711"
"""A schedule the demo creates at runtime (``client.schedules.create``), as a service would per tenant."""

CHECKOUT = demo_app.checkout.__lockgate_workflow__  # type: ignore[attr-defined]
REMINDER = demo_app.reminder.__lockgate_workflow__  # type: ignore[attr-defined]
CANCELLED_ORDER = "A-1004"
"""The order whose reminder the demo cancels by publishing ``demo.order.cancelled``."""


class Board:
    """The demo's display: a live table on a terminal, one line per change elsewhere."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.notes: list[str] = []
        self._seen: dict[str, tuple[str, str | None, str]] = {}
        self._view: Live | None = None
        self._last: list[RunRow] = []

    def __enter__(self) -> Board:
        if self.live:
            self._view = Live(console=self.console, refresh_per_second=8, transient=False)
            self._view.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._view is not None:
            self._view.__exit__(None, None, None)
        elif self._last:
            self.console.print(table(self._last))

    def note(self, text: str) -> None:
        self.notes.append(text)
        if not self.live:
            self.console.print(f"  → {text}")

    def show(self, rows: list[RunRow]) -> None:
        self._last = rows
        if self._view is not None:
            notes = [Text(f"→ {n}", style="dim") for n in self.notes[-6:]]
            self._view.update(Group(table(rows), *notes), refresh=True)
            return
        for row in rows:
            state = (row.status, row.waiting_on, f"{row.retries}{row.last_event}")
            if self._seen.get(row.run_id) != state:
                self._seen[row.run_id] = state
                waiting = f" ({row.waiting_on})" if row.waiting_on and row.status == "running" else ""
                retries = f"  retries {row.retries}" if row.retries else ""
                self.console.print(
                    f"{row.workflow:<14} {short_id(row.run_id)}  {row.status}{waiting}  steps {row.steps_done}{retries}"
                    f"  {row.last_event}"
                )


def table(rows: list[RunRow]) -> Table:
    """The table of the demo's runs."""
    # Laid out for 80 columns: run ids by their last 8 characters (unique among the demo's runs, and
    # the end of the ids `workflows list` shows), statuses whole, the rest wrapping.
    out = FitTable(
        title="lockgate demo", title_justify="left", keep=("workflow", "run", "status"), drop=("waiting", "retries")
    )
    out.add_column("workflow", overflow="fold")
    out.add_column("run", no_wrap=True)
    out.add_column("status", no_wrap=True)
    out.add_column("waiting", overflow="fold")
    out.add_column("steps", no_wrap=True)
    out.add_column("retries", no_wrap=True)
    out.add_column("last event", overflow="fold", ratio=1)
    for row in rows:
        out.add_row(
            row.workflow,
            short_id(row.run_id),
            status_text(row.status),
            row.waiting_on or "",
            str(row.steps_done),
            str(row.retries) if row.retries else "",
            row.last_event,
        )
    return out


def _describe(event: EventInfo | None) -> str:
    if event is None:
        return ""
    data: dict[str, Any] = event.data if isinstance(event.data, dict) else {}
    detail = data.get("name") or data.get("step") or data.get("error_tag") or data.get("new_run_id") or ""
    return f"{when(event.at)[11:]} {event.type} {short(detail, 40)}".rstrip()


def _deliveries(count: int) -> str:
    return f"{count} deliver{'y' if count == 1 else 'ies'}"


def _order(event: EventRecord) -> str:
    key = event.key if isinstance(event.key, dict) else {}
    return str(key.get("order_id", "?"))


async def _published(inspector: Inspector, since: datetime | None) -> list[Published]:
    """The domain events published since ``since``, oldest first, each with its deliveries."""
    events = reversed(await inspector.list_events(since=since, limit=100))
    return [(event, await inspector.deliveries(event.id)) for event in events]


async def _snapshot(
    inspector: Inspector, roots: list[str], triggered: list[str], tickets: set[str], scheduled: list[str]
) -> list[RunRow]:
    ids = list(roots)
    for root in roots:
        ids += [child.id for child in await inspector.runs(parent_id=root, limit=100)]
    ids += triggered
    for name in GATED_NAMES:  # gated runs appear once the gate admits them; oldest first
        runs = await inspector.runs(workflow=name, limit=100)
        ids += [r.id for r in reversed(runs) if r.ticket in tickets]
    ids += scheduled
    rows = []
    for run_id in ids:
        run = await inspector.run(run_id)
        steps = await inspector.steps(run_id)
        events = await inspector.events(run_id)
        retries = sum(1 for a in await inspector.attempts(run_id) if a.status == "failed")
        done = sum(1 for s in steps if s.kind == "step" and s.status == "completed")
        last = _describe(events[-1] if events else None)
        rows.append(RunRow(run.workflow, run.id, run.status, run.waiting_on, done, retries, last, run.error_message))
    return rows


async def run_demo(store: str, board: Board, *, timeout: float, poll: float = 0.2) -> Outcome:
    """Start the demo's runs, feed them their signal and update, and watch them until they end."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    outcome = Outcome()
    opened = open_store(store)
    opened.share_file = False  # the demo never writes into another application's file
    async with Engine(demo_app.app, opened, poll_interval=poll) as engine:
        outcome.created = opened.created
        inspector = inspector_of(engine)
        starts: list[tuple[Any, dict[str, Any]]] = [
            (demo_app.checkout, {"order_id": "A-1001", "amount": 4200}),
            (demo_app.checkout, {"order_id": "A-1002", "amount": 1250}),
            (demo_app.approval, {"order_id": "A-1003", "amount": 99000}),
            (demo_app.quote, {"customer": "acme", "items": 3}),
            (demo_app.reminder, {"order_id": CANCELLED_ORDER}),
            (demo_app.ship, {"order_id": "A-1001"}),  # parks until A-1001's demo.order.paid
            (demo_app.expense, {"order_id": "A-1005", "amount": 56000}),  # parks on an approval token
        ]
        began = to_datetime(engine.clock.now())
        roots = []
        for workflow, payload in starts:
            handle = await engine.start(workflow, payload)
            assert handle.run_id is not None
            roots.append(handle.run_id)
        approval_id, quote_id, reminder_id, expense_id = roots[2], roots[3], roots[4], roots[6]
        await engine.schedules.create(
            TENANT_SCHEDULE,
            workflow=demo_app.heartbeat,
            every=demo_app.HEARTBEAT_EVERY,
            payload={"at": when(began) if began is not None else "tenant-4711"},
            if_exists="update",
            note="one tenant's own heartbeat, created at runtime",
        )
        board.note(f"created runtime schedule {TENANT_SCHEDULE} (every {demo_app.HEARTBEAT_EVERY}) for one tenant")
        since = to_datetime(engine.clock.now())
        tickets: set[str] = set()
        for workflow, payloads in GATED:
            handles = [await engine.start(workflow, payload) for payload in payloads]
            tickets.update(h.ticket for h in handles)
            decided = Counter(h.status + (f" ({h.deferral.mode})" if h.deferral else "") for h in handles)
            counts = ", ".join(f"{n} {status}" for status, n in decided.items())
            board.note(f"offered {len(handles)} starts to {handles[0].workflow}: {counts}")
            if workflow is demo_app.narrate:
                outcome.collapsed_ticket = handles[-1].ticket
        signal_sent = False
        update: asyncio.Task[Any] | None = None
        told: set[int] = set()  # firings already noted
        cancel_sent = False
        settled: set[str] = set()  # events whose deliveries were noted
        reminder_told = False
        with board:
            while True:
                firings = list(reversed(await inspector.schedule_firings(HEARTBEAT, limit=100)))
                tenant = list(reversed(await inspector.schedule_firings(TENANT_SCHEDULE, limit=100)))
                for f in firings + tenant:
                    if f.id not in told and f.status in TERMINAL:
                        told.add(f.id)
                        board.note(f"schedule {f.schedule} fired its {when(f.scheduled_at)[11:]} slot: run {f.status}")
                scheduled = [f.run_id for f in firings + tenant if f.run_id is not None]
                # Events before runs: a checkout succeeds only after its event is stored, so one that
                # succeeds between the two reads shows as a paid event missing here, and the demo waits.
                published = await _published(inspector, began)
                triggered = [d.run_id for _, ds in published for d in ds if d.run_id is not None]
                rows = await _snapshot(inspector, roots, triggered, tickets, scheduled)
                # The scenes' runs decide when the demo ends; the schedule's go on firing meanwhile.
                scenes = [r for r in rows if r.workflow != HEARTBEAT]
                fired = any(f.status == "succeeded" for f in firings) and any(f.status == "succeeded" for f in tenant)
                gate = [f for f in await inspector.flow(since=since) if f.workflow in GATED_NAMES]
                board.show(rows)
                for event, ds in published:
                    if event.id not in settled and not any(d.status == "pending" for d in ds):
                        settled.add(event.id)
                        what = ", ".join(f"{d.workflow} {d.outcome or d.status}" for d in ds) or "no trigger"
                        board.note(f"event {event.name} for {_order(event)}: {_deliveries(len(ds))} ({what})")
                reminder = next(r for r in scenes if r.run_id == reminder_id)
                if reminder.finished and not reminder_told:
                    reminder_told = True
                    board.note(f"{REMINDER} {reminder.run_id} {reminder.status}: {reminder.error or 'no error'}")
                waiting = {r.run_id: r.waiting_on for r in scenes if r.status == "running"}
                if not cancel_sent and waiting.get(reminder_id) == "timer":
                    # The reminder sleeps (parked for an hour): the event's cancel_on reaches it there.
                    await engine.publish(demo_app.order_cancelled, {"order_id": CANCELLED_ORDER}, {"by": "customer"})
                    cancel_sent = True
                    board.note(f"published demo.order.cancelled for {CANCELLED_ORDER} while its reminder sleeps")
                if not signal_sent and waiting.get(approval_id) == "signal":
                    await engine.signal(approval_id, "approve", {"approved": True, "by": "ops@example.com"})
                    signal_sent = True
                    board.note(f"sent signal 'approve' to {approval_id}")
                if waiting.get(expense_id) == "token" and expense_id in demo_app.emailed:
                    token = demo_app.emailed.pop(expense_id)  # as the manager's click on the link would
                    await engine.complete_token(token, {"approved": True, "by": "manager@example.com"})
                    board.note(f"completed the approval token run {expense_id} mailed, as its link would")
                if update is None and waiting.get(quote_id) == "update":
                    remaining = max(1.0, deadline - loop.time())
                    update = asyncio.create_task(
                        engine.update(quote_id, "discount", {"percent": 10}, timeout=remaining)
                    )
                    board.note(f"sent update 'discount' (10%) to {quote_id}; waiting for its answer")
                parked = sum(f.queued for f in gate)
                pending = sum(1 for _, ds in published for d in ds if d.status == "pending")
                paid = sum(1 for event, _ in published if event.name == demo_app.order_paid.name)
                checkouts = sum(1 for r in scenes if r.workflow == CHECKOUT and r.status == "succeeded")
                events_done = cancel_sent and not pending and paid >= checkouts
                if (
                    all(r.finished for r in scenes)
                    and events_done
                    and not parked
                    and fired
                    and (update is None or update.done())
                ):
                    break
                if loop.time() > deadline:
                    outcome.problems.append(f"not every run finished within {timeout:g}s")
                    if parked:
                        outcome.problems.append(f"{parked} start(s) still parked at the gate")
                    if pending:
                        outcome.problems.append(f"{pending} event deliveries still pending")
                    if not fired:
                        outcome.problems.append(
                            f"the schedules {HEARTBEAT} and {TENANT_SCHEDULE} did not both fire within {timeout:g}s"
                        )
                    break
                await asyncio.sleep(poll)
            if update is not None and update.done() and update.exception() is None:
                board.note(f"update 'discount' answered: new price {update.result()}")
            first = roots[0]  # the first checkout streamed its progress (ctx.stream): read it back once it ended
            if any(r.run_id == first and r.finished for r in rows):
                streamed = [c.data.strip() async for c in engine.stream(first)]
                board.note(f"{CHECKOUT} {first} streamed: {' / '.join(streamed) or 'nothing'}")
            board.show(rows)
        if update is None:
            outcome.problems.append("the quote never waited for its update")
        elif not update.done():
            update.cancel()
        elif update.exception() is not None:
            outcome.problems.append(f"the update failed: {update.exception()}")
        outcome.rows = rows
        outcome.flow = gate
        outcome.firings, outcome.tenant_firings = firings, tenant
        outcome.published = published
        for r in rows:
            if r.workflow == "demo.checkout":
                steps = await inspector.steps(r.run_id)
                outcome.charge_waits += [s.flow_wait or 0.0 for s in steps if s.name == "charge"]
        outcome.model = next(iter(await inspector.flow_keys("model")), None)
        # The reminder is meant to end cancelled by demo.order.cancelled; every other run to succeed.
        outcome.problems += [
            f"{r.workflow} run {r.run_id} ended {r.status}"
            for r in scenes
            if r.status != "succeeded" and r.run_id != reminder_id
        ]
        if not cancel_sent:
            outcome.problems.append("the reminder never slept, so demo.order.cancelled was not published")
        elif (reminder.status, reminder.error) != ("cancelled", demo_app.CANCEL_REASON):
            outcome.problems.append(
                f"{REMINDER} run {reminder_id} ended {reminder.status} ({reminder.error}),"
                f" not cancelled with {demo_app.CANCEL_REASON!r}"
            )
        outcome.problems += [
            f"delivery of {event.name} to {d.workflow} {d.status} ({d.reason})"
            for event, ds in published
            for d in ds
            if d.status not in ("started", "pending")
        ]
        outcome.problems += [
            f"schedule {f.schedule}: firing of {when(f.scheduled_at)} {f.status} ({f.why})"
            for f in firings + tenant
            if f.status in ("failed", "cancelled")
        ]
    return outcome


def gate_table(rows: list[FlowRow]) -> Table:
    """The gate's decisions on the demo's gated starts, per workflow and key."""
    out = FitTable(title="gate decisions", title_justify="left")
    for column in ("workflow", "key", "admitted", "queued now", "collapsed", "dropped"):
        out.add_column(column, no_wrap=True, justify="left" if column in ("workflow", "key") else "right")
    for row in rows:
        counts = (row.admitted, row.queued, row.collapsed, row.dropped)
        out.add_row(row.workflow, row.key or "-", *(str(n) for n in counts))
    return out


def gate_summary(rows: list[FlowRow]) -> str:
    """One line reading the gate table: what each control did to its burst."""
    by_name = {r.workflow: r for r in rows}
    parts = []
    if (narrate := by_name.get("demo.narrate")) is not None:
        edits = narrate.admitted + narrate.queued + narrate.collapsed
        parts.append(f"{edits} edits, {narrate.admitted} run: {narrate.collapsed} collapsed")
    if (label := by_name.get("demo.label")) is not None:
        parts.append(f"{label.admitted} labels printed, at most 2 at a time (the rest queued, then admitted)")
    if (sms := by_name.get("demo.sms")) is not None:
        texts = sms.admitted + sms.dropped
        parts.append(f"{texts} texts, {sms.admitted} sent: {sms.dropped} dropped by the rate limit")
    return "; ".join(parts) + "."


def schedule_summary(firings: list[FiringInfo], name: str = HEARTBEAT, origin: str = "declared") -> str:
    """One line on a demo schedule: how often it fired while the demo ran, and how those runs ended."""
    ended = Counter(f.status for f in firings)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(ended.items()))
    every = demo_app.HEARTBEAT_EVERY
    return f"schedule {name} ({origin}, every {every}): {len(firings)} firing(s): {counts}."


def flow_summary(waits: list[float]) -> str:
    """One line on the checkouts' charges under the ``payments`` step flow-control key."""
    waited = [w for w in waits if w > 0]
    longest = f", the longest {max(waited) * 1000:.0f} ms" if waited else ""
    return (
        f"step flow control: {len(waits)} charges under key '{demo_app.PAYMENTS.key}' "
        f"(parallelism {demo_app.PAYMENTS.parallelism}), one at a time: {len(waited)} waited for the slot{longest}."
    )


def tokens_summary(key: FlowKeyRow) -> str:
    """One line on the narration's draft under the ``model`` key, which counts tokens rather than calls."""
    drafted = "agent (two model requests and a tool call, each a step)" if demo_app.WITH_AGENT else "draft"
    return (
        f"tokens: the narration's {drafted} settled {key.units_settled} tokens under key '{key.key}' "
        f"({key.rate} a minute; {key.units_available} left in the window, {key.units_reserved} still reserved)."
    )


def events_summary(published: list[Published], rows: list[RunRow]) -> list[str]:
    """Lines on the demo's domain events: per name, the deliveries and how their runs ended; the reminder."""
    ended = {r.run_id: r.status for r in rows}
    lines = []
    for name in dict.fromkeys(event.name for event, _ in published):
        ds = [d for event, dl in published if event.name == name for d in dl]
        count = sum(1 for event, _ in published if event.name == name)
        runs = Counter(f"{d.workflow} {ended.get(d.run_id or '', d.status)}" for d in ds)
        tail = "".join(f", {n} {what}" for what, n in runs.items())
        lines.append(f"{name}: published {count}x, {_deliveries(len(ds))}{tail}")
    for row in rows:
        if row.workflow != REMINDER:
            continue
        if (row.status, row.error) == ("cancelled", demo_app.CANCEL_REASON):
            ended_by = f"cancelled by {demo_app.order_cancelled.name} ({row.error!r})"
        else:
            ended_by = f"{row.status} ({row.error or 'no error'})"
        lines.append(f"{row.workflow} {CANCELLED_ORDER}: {ended_by}")
    return lines


async def _reset(store: str) -> str | None:
    """Delete a previous demo database (only one holding demo runs alone); the file's path."""
    path = sqlite_path(store)
    if path is None or not os.path.exists(path):
        return path
    with open(path, "rb") as f:
        is_sqlite = f.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    refusal = f"refusing to reset {path}: it is not a lockgate demo database; pass --keep to add to it"
    if not is_sqlite:
        raise click.ClickException(refusal)
    async with open_inspector(App(), store) as inspector:
        runs = await inspector.runs(limit=1000)
    if not runs or any(not r.workflow.startswith("demo.") for r in runs):
        raise click.ClickException(refusal)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


@cli.command()
@click.option(
    "--store",
    default=DEFAULT_DEMO_STORE,
    show_default=True,
    callback=check_store,
    metavar="URL",
    help="Where the demo keeps its runs (LOCKGATE_STORE is deliberately not read).",
)
@click.option("--keep", is_flag=True, help="Keep the runs of earlier demos instead of starting from an empty database.")
@click.option(
    "--timeout", type=DurationType(), default="45s", show_default=True, help="Give up (exit 1) after this long."
)
@click.pass_context
def demo(ctx: click.Context, store: str, keep: bool, timeout: float) -> None:
    """Run the built-in example app and watch its runs live.

    Checkouts with a flaky payment provider (step retries), a durable sleep that parks the
    run, a child workflow, an approval waiting for a signal and a quote answering an update.
    Then the admission gate: 20 quick edits debounced into one run, 5 labels printed at most 2
    at a time, 5 texts under a limit of 3 a minute; a table of its decisions closes the demo.
    Meanwhile a schedule starts a heartbeat every two seconds, once per slot. Each paid
    checkout publishes demo.order.paid, whose trigger starts a fulfilment; a sleeping
    reminder is cancelled by publishing demo.order.cancelled for its order.
    By default a previous demo database is reset first (only one that holds demo runs alone).
    """
    console = make_console()

    async def go() -> tuple[str | None, Outcome]:
        path = sqlite_path(store) if keep else await _reset(store)
        return path, await run_demo(store, Board(console), timeout=timeout)

    path, outcome = run_async(go())
    here = os.path.relpath(path) if path is not None else ""
    url = store if path is None else f"sqlite:///{here if not here.startswith('..') else path}"
    quoted = shlex.quote(url)
    checkout = next((r.run_id for r in outcome.rows if r.workflow == "demo.checkout"), "RUN_ID")
    if outcome.flow:
        console.print()
        console.print(gate_table(outcome.flow))
        console.print(gate_summary(outcome.flow))
    if outcome.firings:
        console.print(schedule_summary(outcome.firings))
    if outcome.tenant_firings:
        console.print(schedule_summary(outcome.tenant_firings, TENANT_SCHEDULE, "created at runtime"))
    if outcome.charge_waits:
        console.print(flow_summary(outcome.charge_waits))
    if outcome.model is not None and outcome.model.weighted:
        console.print(tokens_summary(outcome.model))
    if outcome.published:
        console.print("Domain events:")
        for line in events_summary(outcome.published, outcome.rows):
            console.print(f"  {line}")
    console.print()
    made = " (created by the demo)" if outcome.created else ""
    console.print(f"Database{made}: {path}" if path is not None else f"Store{made}: {display_url(store)}")
    console.print("Inspect it:")
    lockgate = _command()
    console.print(f"  {lockgate} workflows list --store {quoted}", soft_wrap=True)
    console.print(f"  {lockgate} workflows show {checkout} --store {quoted}", soft_wrap=True)
    console.print(f"  {lockgate} workflows flow --store {quoted}", soft_wrap=True)
    ticket = outcome.collapsed_ticket or "TICKET"
    console.print(f"  {lockgate} workflows why {ticket} --store {quoted}   # a collapsed edit", soft_wrap=True)
    console.print(
        f"  {lockgate} schedules firings {HEARTBEAT} --store {quoted}   # the schedule's ledger", soft_wrap=True
    )
    console.print(f"  {lockgate} events list --store {quoted}   # the domain events", soft_wrap=True)
    paid = next((e.id for e, _ in outcome.published if e.name == demo_app.order_paid.name), "EVENT_ID")
    console.print(f"  {lockgate} events show {paid} --store {quoted}", soft_wrap=True)
    console.print(
        f"  {lockgate} serve lockgate.demo_app:app --store {quoted}   # serve the demo app yourself", soft_wrap=True
    )
    console.print("See it in the browser (the dashboard):")
    console.print(f"  {lockgate} inspect --store {quoted} --app lockgate.demo_app:app", soft_wrap=True)
    console.print(f"  then open {DASHBOARD_URL}", soft_wrap=True)
    if outcome.problems:
        for problem in outcome.problems:
            click.echo(f"error: {problem}", err=True)
        ctx.exit(1)


def _command() -> str:
    """How to call ``lockgate`` from here: the bare name when it is on ``PATH``, else the script's own path."""
    script = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    found = shutil.which("lockgate")
    if not script or os.path.basename(script) != "lockgate" or (found and os.path.realpath(found) == script):
        return "lockgate"
    relative = os.path.relpath(sys.argv[0])
    return shlex.quote(relative if not relative.startswith("..") else os.path.abspath(sys.argv[0]))
