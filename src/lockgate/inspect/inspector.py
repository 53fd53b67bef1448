"""``Inspector``: the one read API the CLI, the HTTP API and the dashboard share.

Every method reads committed data through store operations and returns typed records that
serialize to JSON (``to_dict()``, or ``pydantic_core.to_jsonable_python``). Lists take
explicit filters and a ``limit``, and are ordered so that a page can continue from a cursor
(``offset`` for runs, ``before`` for the ledger, ``after`` for parked starts).
"""

from __future__ import annotations

from datetime import datetime

from ..app import App
from ..clock import Clock, SystemClock
from ..crypto import Keyring, reveal_row
from ..errors import InvalidArgument, LockgateError
from ..events import DeliveryRecord, EventRecord
from ..records import AttemptInfo, EventInfo, RunInfo, StepInfo
from ..store import Store, journal, shared
from ..store.base import Row
from ..store.keys import Rotation, rotate_keys
from . import events as domain_events
from .cluster import ClusterStatus, cluster_status
from .flow import FlowRow, flow
from .flowkeys import FlowKeyRow, flow_keys
from .gate import LedgerEntry, ParkedStart, Pause, ledger_page, parked_page, pauses
from .runs import RunDetail, check_page, check_status, run_detail, runs_page
from .schedules import FiringInfo, ScheduleInfo, firings_page, schedule_infos
from .stats import Stats, stats
from .trace import Trace, trace

__all__ = ["Inspector"]

DEAD_LETTER_PAGE = 100  # runs read per query while skipping discarded failures


class Inspector:
    """Read-only queries over one open ``store``; ``app`` gives the concurrency limits ``trace`` estimates with.

    Values of encrypted runs show in clear where ``keyring`` (default: ``LOCKGATE_ENCRYPTION_KEYS``)
    opens them, and as ``<encrypted>`` elsewhere.
    """

    def __init__(
        self, store: Store, app: App | None = None, clock: Clock | None = None, *, keyring: Keyring | None = None
    ) -> None:
        self.store = store
        self.app = app or App()
        self.clock = clock or SystemClock()
        self.keyring = keyring if keyring is not None else Keyring.load()

    # -- runs ------------------------------------------------------------------------------

    async def runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        parent_id: str | None = None,
        source: str | None = None,
        dead_letter: bool = False,
        before: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[RunInfo]:
        """Runs matching the filters, newest first, paged by ``limit`` and ``offset``, or by ``before``:
        the id of the last run of the previous page, a cursor that new runs do not shift.

        ``source`` keeps runs started from there (``api``, ``cli``, ``event:<name>``, ``child:<run id>``, ...).
        ``dead_letter`` keeps failed runs nobody has discarded (``status`` may then only be ``failed``).
        ``UnknownRun`` if ``before`` names no run.
        """
        check_status(status)
        check_page(limit, offset)
        if not dead_letter:
            return await self.store.read(
                runs_page,
                workflow=workflow,
                status=status,
                parent_id=parent_id,
                source=source,
                before=before,
                limit=limit,
                offset=offset,
                keyring=self.keyring,
            )
        if source is not None:
            raise InvalidArgument("dead letters cannot be filtered by source")
        if status not in (None, "failed"):
            raise InvalidArgument("dead letters are failed runs; they cannot be combined with another status")
        return await self._dead_letters(workflow, parent_id, before, limit, offset)

    async def _dead_letters(
        self, workflow: str | None, parent_id: str | None, before: str | None, limit: int, offset: int
    ) -> list[RunInfo]:
        found: list[RunInfo] = []
        skipped = 0
        page = max(DEAD_LETTER_PAGE, limit + offset)
        at = 0
        while len(found) < limit:
            batch = await self.store.read(
                runs_page,
                workflow=workflow,
                status="failed",
                parent_id=parent_id,
                before=before,
                limit=page,
                offset=at,
                keyring=self.keyring,
            )
            for run in batch:
                if run.discarded:
                    continue
                if skipped < offset:
                    skipped += 1
                    continue
                found.append(run)
                if len(found) == limit:
                    break
            if len(batch) < page:
                break
            at += page
        return found

    async def run(self, run_id: str) -> RunInfo:
        """One run (``UnknownRun`` if there is none)."""
        return RunInfo.from_row(self._shown(await self.store.read(shared.get_run, run_id)))

    async def run_detail(self, run_id: str, *, children_limit: int = 1000) -> RunDetail:
        """One run with its journal, step attempts, events and children (``UnknownRun`` if there is none)."""
        if children_limit < 1:
            raise InvalidArgument("children_limit must be >= 1")
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
        if limit < 1:
            raise InvalidArgument("limit must be >= 1")
        if kind is not None and kind not in ("arrival", "drain"):
            raise InvalidArgument(f"unknown ledger kind {kind!r}: arrival or drain")
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
        if limit < 1:
            raise InvalidArgument("limit must be >= 1")
        return await self.store.read(parked_page, workflow=workflow, mode=mode, after=after, limit=limit)

    # -- schedules -------------------------------------------------------------------------------

    async def schedules(self) -> list[ScheduleInfo]:
        """Every schedule the app declares or the store holds, with its next firing time."""
        return await self.store.read(schedule_infos, self.app.schedules(), self.clock.now())

    async def schedule_firings(self, name: str, limit: int = 50) -> list[FiringInfo]:
        """The firing ledger of schedule ``name``: claimed, skipped (why), started, failed..., newest first."""
        return await self.store.read(firings_page, self.app.schedules(), name, limit)

    # -- totals --------------------------------------------------------------------------------

    async def stats(self, workflow: str | None = None) -> Stats:
        """Runs per workflow and status, and starts parked at the gate per mode."""
        return await self.store.read(stats, workflow)

    async def cluster_status(self) -> ClusterStatus:
        """The workers sharing the store, what each holds, which look dead, and the sweep leases."""
        return await self.store.read(cluster_status, self.clock.now())
