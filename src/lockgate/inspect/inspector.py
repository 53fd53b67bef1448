"""``Inspector``: the one read API the CLI, the HTTP API and the dashboard share.

Every method reads committed data through store operations and returns typed records that
serialize to JSON (``to_dict()``, or ``pydantic_core.to_jsonable_python``). Lists take
explicit filters and a ``limit``, and are ordered so that a page can continue from a cursor
(``cursor`` for runs, ``before`` for the ledger, ``after`` for parked starts).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import datetime

from ..app import App
from ..clock import Clock, SystemClock, to_datetime
from ..crypto import Keyring, reveal_row
from ..engine.replay_check import JournalExport
from ..errors import InvalidArgument, LockgateError
from ..events import DeliveryRecord, EventRecord
from ..records import AttemptInfo, EventInfo, RunInfo, StepInfo
from ..store import Store, journal, shared
from ..store.base import Row, Tx
from ..store.keys import Rotation, rotate_keys
from ..store.schema import SchemaState, schema_state
from . import callbacks, replay
from . import events as domain_events
from . import views as saved_views
from .activity import admissions
from .callbacks import TokenInfo
from .cluster import UNROUTABLE_AFTER, ClusterStatus, cluster_status
from .doctor import DoctorReport, DoctorSettings, diagnose
from .flow import FlowRow, flow
from .flowkeys import FlowKeyRow, flow_keys
from .gate import LedgerEntry, ParkedStart, Pause, ledger_page, parked_page, pauses
from .listing import RunFilter, RunPage, runs_page
from .replay import ReplayReport
from .runs import RunDetail, run_detail
from .schedules import FiringInfo, ScheduleInfo, firings_page, schedule_info_page, schedule_infos
from .standby import ReplicaLag, measure_lag
from .stats import Stats, last_successes, stats
from .trace import Trace, trace
from .views import SavedView

__all__ = ["Inspector"]

FOLLOW_GRACE = 5.0
"""Seconds of overlap with which ``follow_runs`` re-reads recent runs (a run committed late is still shown)."""


class Inspector:
    """Read-only queries over one open ``store``; ``app`` gives the concurrency limits ``trace`` estimates with.

    Values of encrypted runs show in clear where ``keyring`` (default: ``LOCKGATE_ENCRYPTION_KEYS``)
    opens them, and as ``<encrypted>`` elsewhere.

    ``primary``: the write store, when ``store`` is a read store (a streaming standby of it, see
    ``open_read_store``): ``replica_lag`` measures against it, and saved views, which their readers
    write, are read and written there.
    """

    def __init__(
        self,
        store: Store,
        app: App | None = None,
        clock: Clock | None = None,
        *,
        keyring: Keyring | None = None,
        primary: Store | None = None,
    ) -> None:
        self.store = store
        self.app = app or App()
        self.clock = clock or SystemClock()
        self.keyring = keyring if keyring is not None else Keyring.load()
        self.primary = primary
        self.unroutable_after = UNROUTABLE_AFTER  # an engine's own threshold (its ``unroutable_after``)

    async def replica_lag(self) -> ReplicaLag | None:
        """How far this inspector's read store trails the write store; ``None`` when it reads the write store."""
        if self.primary is None:
            return None
        return await measure_lag(self.primary, self.store)

    # -- runs ------------------------------------------------------------------------------

    async def runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        statuses: Sequence[str] = (),
        parent_id: str | None = None,
        source: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        id_prefix: str | None = None,
        text: str | None = None,
        dead_letter: bool = False,
        before: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[RunInfo]:
        """Runs matching every filter given, newest first: the items of ``run_page`` (see ``RunFilter``).

        ``status`` is one more status for ``statuses``. A page continues from ``cursor`` (a page's
        ``next_cursor``) or from ``before``, the id of the previous page's last run (``UnknownRun``
        if there is none): positions that new runs do not shift.
        """
        where = RunFilter(
            workflow=workflow,
            statuses=(*statuses, *(() if status is None else (status,))),
            parent_id=parent_id,
            source=source,
            since=since,
            until=until,
            id_prefix=id_prefix,
            text=text,
            dead_letter=dead_letter,
        )
        return (await self.run_page(where, cursor=cursor, before=before, limit=limit, offset=offset)).items

    async def run_page(
        self,
        where: RunFilter | None = None,
        *,
        cursor: str | None = None,
        before: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> RunPage:
        """One page of the runs ``where`` keeps (every run without it), newest first, with the cursor of
        the next page (``InvalidArgument`` for a filter no run can match or a cursor no page gave)."""
        _check_count("limit", limit)
        _check_count("offset", offset, least=0)
        return await self.store.read(
            runs_page,
            where or RunFilter(),
            cursor=cursor,
            before=before,
            limit=limit,
            offset=offset,
            keyring=self.keyring,
        )

    async def children(self, run_id: str, *, cursor: str | None = None, limit: int = 50) -> RunPage:
        """The runs ``run_id`` started, newest first (``UnknownRun`` if there is no such run)."""
        _check_count("limit", limit)
        return await self.store.read(_children, run_id, cursor, limit, self.keyring)

    async def follow_runs(
        self, where: RunFilter | None = None, *, tail: int = 10, poll: float = 1.0
    ) -> AsyncIterator[RunInfo]:
        """The last ``tail`` runs ``where`` keeps, oldest first, then each new one as it is committed.

        New runs are those created since the newest one shown, re-read with ``FOLLOW_GRACE``
        seconds of overlap (each shown once): a run committed a moment after a newer one is
        still shown. Ends when the caller stops iterating.
        """
        where = (where or RunFilter()).check()
        _check_count("tail", tail, least=0)
        if not poll > 0:
            raise InvalidArgument("poll must be > 0")
        newest = self.clock.now()
        last = list(reversed((await self.run_page(where, limit=tail)).items)) if tail else []
        # what is already there is not new: only the last ``tail`` of it is shown
        shown = {r.id: r.created_at.timestamp() for r in await self._created_since(where, newest - FOLLOW_GRACE)}
        for run in last:
            shown[run.id] = run.created_at.timestamp()
            newest = max(newest, shown[run.id])
            yield run
        while True:
            await self.clock.sleep_until(self.clock.now() + poll)
            for run in reversed(await self._created_since(where, newest - FOLLOW_GRACE)):
                if run.id in shown:
                    continue
                shown[run.id] = run.created_at.timestamp()
                newest = max(newest, shown[run.id])
                yield run
            shown = {k: at for k, at in shown.items() if at >= newest - FOLLOW_GRACE}

    async def _created_since(self, where: RunFilter, floor: float) -> list[RunInfo]:
        """Every run ``where`` keeps created at or after ``floor``, newest first."""
        if where.since is not None:
            floor = max(floor, where.since.timestamp())
        window = replace(where, since=to_datetime(floor))
        if window.until is not None and window.since is not None and window.since >= window.until:
            return []  # the span asked for is over: nothing new can come
        found: list[RunInfo] = []
        cursor: str | None = None
        while True:
            page = await self.run_page(window, cursor=cursor, limit=500)
            found += page.items
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    async def run(self, run_id: str) -> RunInfo:
        """One run (``UnknownRun`` if there is none)."""
        return RunInfo.from_row(self._shown(await self.store.read(shared.get_run, run_id)))

    async def run_detail(self, run_id: str, *, children_limit: int = 1000) -> RunDetail:
        """One run with its journal, step attempts, events and children (``UnknownRun`` if there is none)."""
        _check_count("children_limit", children_limit)
        return await self.store.read(run_detail, run_id, children_limit=children_limit, keyring=self.keyring)

    async def steps(self, run_id: str) -> list[StepInfo]:
        """The run's journal, in the order its body reached each entry."""
        return [StepInfo.from_row(self._shown(r)) for r in await self.store.read(journal.load_journal, run_id)]

    async def attempts(self, run_id: str) -> list[AttemptInfo]:
        """Every recorded attempt of the run's steps."""
        return [AttemptInfo.from_row(self._shown(r)) for r in await self.store.read(journal.list_attempts, run_id)]

    async def events(self, run_id: str) -> list[EventInfo]:
        """The run's lifecycle events, oldest first."""
        return [EventInfo.from_row(self._shown(r)) for r in await self.store.read(journal.list_events, run_id)]

    def _shown(self, row: Row) -> Row:
        return reveal_row(self.keyring, row)

    async def tokens(self, run_id: str) -> list[TokenInfo]:
        """The approval tokens the run made, oldest first, without their secrets (``inspect/callbacks.py``)."""
        run = await self.store.read(shared.get_run, run_id)
        return await callbacks.run_tokens(self.store, run_id, self.clock.now(), run["status"] in shared.LIVE)

    async def token_state(self, token: str) -> TokenInfo:
        """The state of the token whose secret is ``token``; ``UnknownToken`` when there is none."""
        return await callbacks.token_state(self.store, token, self.clock.now())

    # -- encryption keys ---------------------------------------------------------------------

    async def rotate_keys(self, *, workflow: str | None = None, batch: int = 500, dry_run: bool = False) -> Rotation:
        """Seal every stored value again under the keyring's newest key, ``batch`` rows per commit.

        The one write the inspector makes: a maintenance pass over what is stored, safe while
        workers run and resumable (see ``store/keys.py``).
        """
        return await rotate_keys(self.store, self.keyring, workflow=workflow, batch=batch, dry_run=dry_run)

    # -- domain events -------------------------------------------------------------------------

    async def list_events(
        self, *, name: str | None = None, since: datetime | None = None, limit: int = 50
    ) -> list[EventRecord]:
        """Published domain events, newest first."""
        _check_count("limit", limit)
        return await domain_events.list_events(self.store, self.keyring, name=name, since=since, limit=limit)

    async def get_event(self, event_id: str) -> EventRecord:
        """One published event (``InvalidArgument`` if there is none)."""
        return await domain_events.get_event(self.store, self.keyring, event_id)

    async def deliveries(self, event_id: str) -> list[DeliveryRecord]:
        """What became of ``event_id`` for each trigger listening for it."""
        return await domain_events.deliveries(self.store, event_id)

    # -- the gate ----------------------------------------------------------------------------

    async def flow(self, workflow: str | None = None, *, since: datetime | None = None) -> list[FlowRow]:
        """Per workflow and key: queued, oldest waiting, in flight, and the decisions since ``since`` (ever)."""
        return await self.store.read(
            flow, self.clock.now(), workflow=workflow, since=None if since is None else since.timestamp()
        )

    async def admissions(
        self, since: datetime, *, buckets: int = 30, until: datetime | None = None, workflow: str | None = None
    ) -> dict[tuple[str, str], list[int]]:
        """Starts admitted per (workflow, key) in ``buckets`` equal buckets from ``since`` to ``until`` (now)."""
        start = since.timestamp()
        end = self.clock.now() if until is None else until.timestamp()
        if end <= start:
            raise InvalidArgument("since must be before until")
        return await self.store.read(admissions, start, (end - start) / max(buckets, 1), buckets, workflow)

    async def flow_keys(self, key: str | None = None) -> list[FlowKeyRow]:
        """Step flow-control keys: limits in force, running, waiting, started in the window, oldest waiter."""
        return await self.store.read(flow_keys, self.clock.now(), key)

    async def trace(self, ticket: str) -> Trace:
        """What became of the arrival ``ticket`` (``LockgateError`` for an unknown ticket)."""
        found = await self.store.read(trace, ticket, self.clock.now(), self.concurrency_limits())
        if found is None:
            raise LockgateError(f"no arrival with ticket {ticket!r}")
        return found

    def concurrency_limits(self) -> dict[str, int]:
        """The limit of each concurrency scope the app declares (empty without an app)."""
        return {
            d.gate.concurrency_scope: d.gate.concurrency.limit
            for d in self.app.definitions().values()
            if d.gate is not None and d.gate.concurrency is not None
        }

    async def ledger(
        self,
        *,
        workflow: str | None = None,
        ticket: str | None = None,
        kind: str | None = None,
        outcome: str | None = None,
        since: datetime | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[LedgerEntry]:
        """Gate decisions matching every given filter, newest first; pass the last entry's id as ``before``."""
        _check_count("limit", limit)
        if kind is not None and kind not in ("arrival", "drain"):
            raise InvalidArgument(f"unknown ledger kind {kind!r}: arrival or drain")
        _check_row_id("before", before)
        return await self.store.read(
            ledger_page,
            workflow=workflow,
            ticket=ticket,
            kind=kind,
            outcome=outcome,
            since=None if since is None else since.timestamp(),
            before=before,
            limit=limit,
        )

    async def pauses(self) -> list[Pause]:
        """The pauses in force: paused workflows and held flow-control keys, by scope."""
        return await self.store.read(pauses, self.clock.now())

    async def parked(
        self, *, workflow: str | None = None, mode: str | None = None, after: int | None = None, limit: int = 100
    ) -> list[ParkedStart]:
        """Starts parked at the gate with their tickets, oldest arrival first; the last one's ``seq`` as
        ``after`` gives the next page."""
        _check_count("limit", limit)
        _check_row_id("after", after)
        return await self.store.read(parked_page, workflow=workflow, mode=mode, after=after, limit=limit)

    # -- schedules -------------------------------------------------------------------------------

    async def schedules(self) -> list[ScheduleInfo]:
        """Every schedule the app declares or the store holds, with its next firing time."""
        return await self.store.read(schedule_infos, self.app.schedules(), self.clock.now())

    async def schedule_page(
        self, *, limit: int = 100, cursor: str | None = None, workflow: str | None = None, prefix: str | None = None
    ) -> tuple[list[ScheduleInfo], str | None]:
        """``schedules`` a page at a time, by name after ``cursor``; the next page's cursor, ``None`` at the end."""
        return await self.store.read(
            schedule_info_page,
            self.app.schedules(),
            self.clock.now(),
            limit=limit,
            cursor=cursor,
            workflow=workflow,
            prefix=prefix,
        )

    async def schedule_firings(self, name: str, limit: int = 50) -> list[FiringInfo]:
        """The firing ledger of schedule ``name``: claimed, skipped (why), started, failed..., newest first."""
        _check_count("limit", limit)
        return await self.store.read(firings_page, self.app.schedules(), name, limit)

    # -- totals --------------------------------------------------------------------------------

    async def stats(self, workflow: str | None = None, *, hours: int | None = None) -> Stats:
        """Runs per workflow and status, and starts parked at the gate per mode; with ``hours``, also the
        runs created in each of the last ``hours`` hours (``Stats.hourly``)."""
        return await self.store.read(stats, workflow, hours=hours, now=self.clock.now())

    async def last_successes(self) -> dict[str, float]:
        """When each workflow's newest succeeded run finished, by workflow (seconds since the epoch): what
        ``/metrics`` serves as ``lockgate_last_success_timestamp_seconds``."""
        return await self.store.read(last_successes)

    async def cluster_status(self) -> ClusterStatus:
        """The workers sharing the store, what each holds, which look dead, and the sweep leases."""
        return await self.store.read(cluster_status, self.clock.now(), self.unroutable_after)

    async def schema(self) -> SchemaState:
        """The migrations the database has applied, against those this code ships."""
        return await self.store.read(schema_state)

    # -- saved views (the dashboard's) -------------------------------------------------------------

    async def saved_views(self) -> list[SavedView]:
        """The runs-list views operators saved, by name."""
        return await saved_views.list_views(self.primary or self.store)

    async def save_view(self, name: str, query: str) -> SavedView:
        """Save the runs-list filters ``query`` (a URL query string) as ``name``, replacing one of that name.

        Like ``rotate_keys``, a write the inspector makes: a preference of the people reading, not
        a change to any run."""
        return await saved_views.save_view(self.primary or self.store, name, query, self.clock.now())

    async def delete_view(self, name: str) -> bool:
        """Forget the saved view ``name``; whether there was one."""
        return await saved_views.delete_view(self.primary or self.store, name)

    async def doctor(self, settings: DoctorSettings | None = None) -> DoctorReport:
        """A one-shot health report (``lockgate doctor``); schedules are judged when the app declares workflows."""
        schedules = self.app.schedules() if self.app.names else None
        return await self.store.read(diagnose, self.clock.now(), settings or DoctorSettings(), schedules)

    # -- deploy checks ---------------------------------------------------------------------------

    async def export_run(self, run_id: str) -> JournalExport:
        """One run's row and journal as ``lockgate workflows export`` writes them (``UnknownRun``)."""
        return await self.store.read(replay.export_run, run_id)

    async def replay_check(
        self, *, workflow: str | None = None, limit: int = 1000, include_ended: bool = False
    ) -> ReplayReport:
        """Replay the journals of live runs (and the newest ended ones) against this inspector's app."""
        _check_count("limit", limit)
        exports = await self.store.read(replay.checkable, workflow=workflow, limit=limit, include_ended=include_ended)
        return await replay.check(self.app, exports, keyring=self.keyring)


MAX_COUNT = 1_000_000
"""The largest count (a page's ``limit``, an ``offset``) a read takes, as the CLI's options do."""


def _check_count(name: str, value: int, *, least: int = 1) -> None:
    """Refuse a count that is no whole number in range: a typed error naming it, never a store failure."""
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= MAX_COUNT:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise InvalidArgument(f"{name} must be a whole number from {least} to {MAX_COUNT:,}, got {shown}")


def _check_row_id(name: str, value: int | None) -> None:
    """Refuse a row id no table can hold (a 64-bit integer): a store would fail on it, not find nothing."""
    if value is not None and not -(2**63) <= value < 2**63:
        raise InvalidArgument(f"{name} is not a row id: {value}")


async def _children(tx: Tx, run_id: str, cursor: str | None, limit: int, keyring: Keyring) -> RunPage:
    await shared.get_run(tx, run_id)  # UnknownRun rather than an empty page
    return await runs_page(tx, RunFilter(parent_id=run_id), cursor=cursor, limit=limit, keyring=keyring)
