"""A nemesis run: ``lockgate serve`` workers on a private primary and standby, a mixed load, and faults.

Three kinds of worker share the load: plain ones, one in a network namespace of its own (the
``partition`` nemesis cuts its link) and one under libfaketime (the ``skew`` nemesis). Every
process reaches the database by the multi-host URL, so a promoted standby is found by itself.
The steps' side effects go to a third server that no nemesis touches. A driver starts work;
the nemeses take turns (shuffled, one every ``every`` seconds); then the load stops, the faults
are healed, the cluster settles and ``checks.check`` reads every invariant back.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lockgate as lg
from lockgate.durations import to_seconds

from ..cluster.harness import Cluster, Worker, until
from ..pgserver import PrivatePostgres, Replicas, private_postgres, replicas
from . import faults
from .app import SCHEMA, app, ping
from .checks import Arrival, Report, check
from .faults import FAKETIME, KINDS, SERVER_IP, Fault

__all__ = ["Config", "available", "nemesis"]

APP_REF = "tests.nemesis.app:app"
LAPSED = re.compile(r"run (run_\w+): lease lost \(not renewed in time")  # engine/dispatcher.py's line
ARGS = ("--no-http",)
SIDE_OPTIONS = "connect_timeout=5&tcp_user_timeout=5000"  # a cut side connection fails fast, and is retried
# (workflow, weight, keys): what the driver starts, how often, under which keys.
MIX: list[tuple[str, int, int]] = [
    ("nem.plain", 3, 0),
    ("nem.limited", 3, 2),
    ("nem.sleeping", 2, 0),
    ("nem.flowed", 2, 0),
    ("event", 2, 0),
]


@dataclass
class Config:
    """``seconds`` of load at ``rate`` arrivals a second; a fault every ``every`` s, of ``kinds`` in turn."""

    seconds: float = 30.0
    kinds: Sequence[str] = KINDS
    every: float = 3.0
    rate: float = 4.0
    # Not shorter: on a shared 2-core machine (load average 10-17) a busy worker's event loop stalled
    # for more than 2 s now and then, and its runs moved as a frozen worker's do.
    lease: str = "3s"
    partition_for: float = 4.0  # seconds a cut lasts (longer than the lease: the worker's runs move)
    burst: int = 100  # starts at once while the database restarts
    settle_timeout: float = 120.0
    seed: int | None = None
    once: bool = False  # each kind once, in two lanes (``_lanes``), then the load stops: the short run in the suite


@dataclass
class _Cluster:
    """The servers, the workers and their roles."""

    pair: Replicas
    side: PrivatePostgres
    db: str
    config: Config
    log_dir: Path
    group: Cluster
    roles: dict[int, str] = field(default_factory=dict)  # pid: "plain", "netns", "skew+30s", ...
    db_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    rebuild: asyncio.Task[None] | None = None

    def store(self, remote: bool) -> str:
        url = self.pair.url(self.db)
        return url.replace("127.0.0.1", SERVER_IP) if remote else url

    def side_url(self, remote: bool) -> str:
        url = f"{self.side.url('nemesis')}?{SIDE_OPTIONS}"
        return url.replace("127.0.0.1", SERVER_IP) if remote else url

    def spawn(self, role: str) -> Worker:
        remote = role == "netns"
        wrap = faults.in_netns() if remote else faults.skewed(role[4:]) if role.startswith("skew") else []
        worker = Worker(
            f"w{len(self.group.workers) + 1}",
            self.side_url(remote),
            self.log_dir,
            lease=self.config.lease,
            max_runs=20,
            store=self.store(remote),
            app=APP_REF,
            args=ARGS,
            wrap=wrap,
        )
        self.group.workers.append(worker)
        self.roles[worker.pid] = role
        return worker

    def alive(self, role: str) -> list[Worker]:
        return [w for w in self.group.workers if w.alive() and self.roles[w.pid] == role]


class _Load:
    """The driver: one arrival, or (one time in four) a burst of 3-8 of one workflow and key."""

    def __init__(self, client: lg.Client, rng: random.Random) -> None:
        self.client = client
        self.rng = rng
        self.arrivals: list[Arrival] = []
        self.events: list[tuple[str, int, float]] = []  # (event id, n, when acknowledged)
        self.refused: list[str] = []
        self.n = 0

    async def one(self, workflow: str, key: str = "") -> None:
        self.n += 1
        n = self.n
        try:
            if workflow == "event":
                event_id = await asyncio.wait_for(self.client.publish(ping, {"id": f"e{n}"}, {"n": n}), 20)
                self.events.append((event_id, n, time.time()))
                return
            payload: dict[str, Any] = {"n": n, "key": key} if key else {"n": n}
            handle = await asyncio.wait_for(self.client.start(workflow, payload), 20)
        except Exception as exc:
            self.refused.append(f"{workflow}: {type(exc).__name__}: {exc}")
            return
        self.arrivals.append(Arrival(workflow, handle.ticket, handle.status, handle.run_id, n, time.time()))

    async def drive(self, rate: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            workflow, _, keys = self.rng.choices(MIX, weights=[w for _, w, _ in MIX])[0]
            key = f"k{self.rng.randrange(keys)}" if keys else ""
            size = self.rng.randint(3, 8) if self.rng.random() < 0.25 else 1
            await asyncio.gather(*(self.one(workflow, key) for _ in range(size)))
            await faults.pause(self.rng.expovariate(rate), stop)


def _replenish(c: _Cluster) -> None:
    """A worker started during a failover may have refused to boot (no primary among the hosts): start another."""
    wanted = {"plain": 2, "netns": int("partition" in c.config.kinds)}
    for role, count in wanted.items():
        for _ in range(count - len(c.alive(role))):
            c.spawn(role)
    skewed = [w for w in c.group.workers if w.alive() and c.roles[w.pid].startswith("skew")]
    if "skew" in c.config.kinds and not skewed:
        c.spawn("skew+30s")


def _victim(c: _Cluster, rng: random.Random) -> Worker:
    """A plain worker to hit: any; in the short run the oldest, one that has booted and holds runs
    (its faults overlap, and a replacement started a moment ago would hold none)."""
    plain = c.alive("plain")
    return plain[0] if c.config.once else rng.choice(plain)


async def _inject(kind: str, c: _Cluster, load: _Load, rng: random.Random, *, rebuild: bool = True) -> Fault:
    """Inject one fault of ``kind``; after a failover, rebuild a standby unless told no other failover follows."""
    _replenish(c)
    lease = to_seconds(c.config.lease)
    began = time.time()
    if kind == "kill":
        victim = _victim(c, rng)
        victim.kill()
        c.spawn("plain")
        return Fault(kind, victim.pid, began, began)
    if kind == "stop":
        victim = _victim(c, rng)
        faults.freeze(victim.pid, True)
        await asyncio.sleep(lease * 2)
        faults.freeze(victim.pid, False)
        return Fault(kind, victim.pid, began, time.time())
    if kind == "partition":
        (victim,) = c.alive("netns")
        faults.link(False)
        await asyncio.sleep(c.config.partition_for)
        faults.link(True)
        return Fault(kind, victim.pid, began, time.time())
    if kind == "skew":
        (old,) = [w for w in c.group.workers if w.alive() and c.roles[w.pid].startswith("skew")]
        offset = "-30s" if c.roles[old.pid].endswith("+30s") else "+30s"
        old.stop()
        await old.wait()
        c.spawn(f"skew{offset}")
        return Fault(kind, old.pid, began, time.time())  # the stopped one: its cut steps run again elsewhere
    if kind.startswith("failover") and c.rebuild is not None:
        await c.rebuild  # the standby a previous failover used up is being rebuilt
    async with c.db_lock:
        if kind.startswith("failover") and not c.pair.has_standby:  # used up, none rebuilt: build one now
            await asyncio.to_thread(c.pair.ensure_standby)
        if kind == "restart":
            burst = asyncio.gather(*(load.one("nem.plain") for _ in range(c.config.burst)))
            await asyncio.sleep(0.05)
            await asyncio.to_thread(c.pair.primary.restart, "immediate")
            await burst
            return Fault(kind, 0, began, time.time())
        cut = 0.0
        if kind == "failover-sync":
            await asyncio.to_thread(c.pair.replicate, synchronous=True)
            await asyncio.sleep(1.0)
        else:
            await asyncio.to_thread(c.pair.replicate, synchronous=False)
            cut = await asyncio.to_thread(c.pair.cut)  # acknowledged before: on the standby
            await asyncio.sleep(1.0)  # acknowledged meanwhile: on the primary only
        killed, _ = await asyncio.to_thread(c.pair.fail)
        c.rebuild = asyncio.create_task(_rebuild(c)) if rebuild else None
        return Fault(kind, 0, killed, time.time(), cut=cut)


async def _rebuild(c: _Cluster) -> None:
    async with c.db_lock:  # no restart meanwhile: the base backup reads from the primary
        await asyncio.to_thread(c.pair.ensure_standby)


async def _nemeses(c: _Cluster, load: _Load, rng: random.Random, stop: asyncio.Event) -> list[Fault]:
    if c.config.once:
        return await _lanes(c, load, rng, stop)
    injected: list[Fault] = []
    turn: list[str] = []
    while not await faults.pause(c.config.every * rng.uniform(0.7, 1.3), stop):
        if not turn:
            turn = list(c.config.kinds)
            rng.shuffle(turn)
        injected.append(await _inject(turn.pop(0), c, load, rng))
    return injected


# The short run's two lanes: its worker faults one after another (a stop and a partition at once, on two
# workers), beside its database faults one after another (no standby rebuilt: the spare serves the second).
WORKER_LANE = (("kill",), ("stop", "partition"), ("skew",))
DATABASE_LANE = ("restart", "failover-sync", "failover-async")


async def _lanes(c: _Cluster, load: _Load, rng: random.Random, stop: asyncio.Event) -> list[Fault]:
    """Each kind once, mixed: the two lanes at once, each a fault every ``every`` seconds or so."""
    kinds = set(c.config.kinds)

    async def workers() -> list[Fault]:
        done: list[Fault] = []
        for group in ([k for k in g if k in kinds] for g in WORKER_LANE):
            if group and not await faults.pause(c.config.every, stop):
                done += await asyncio.gather(*(_inject(k, c, load, rng) for k in group))
        return done

    async def database() -> list[Fault]:
        done: list[Fault] = []
        for kind in (k for k in DATABASE_LANE if k in kinds):
            if not await faults.pause(c.config.every, stop):  # the second failover's standby: the spare
                done.append(await _inject(kind, c, load, rng, rebuild=False))
        return done

    hit, failed = await asyncio.gather(workers(), database())
    return hit + failed


async def _settle(c: _Cluster, client: lg.Client, stopped: float) -> tuple[int, str | None]:
    """Wait until everything started before ``stopped`` has ended (crash-looped runs resumed)."""
    resumed = 0
    left: list[Any] = []
    fetch = c.group.fetch

    async def settled() -> bool:
        nonlocal resumed
        for (run_id,) in await fetch(
            "SELECT id FROM lockgate_runs WHERE status = 'suspended' AND error_tag = 'WorkflowCrashLooped'"
        ):
            await client.resume(run_id)
            resumed += 1
        rows = await fetch(
            "SELECT (SELECT COUNT(*) FROM lockgate_pending),"
            " (SELECT COUNT(*) FROM lockgate_runs WHERE status IN ('running', 'suspended')"
            "    AND (workflow <> 'nem.tick' OR created_at <= %s)),"
            " (SELECT COUNT(*) FROM lockgate_deliveries WHERE status = 'pending'),"
            " (SELECT COUNT(*) FROM lockgate_schedule_firings WHERE status IN ('claimed', 'buffered', 'started')"
            "    AND scheduled_at <= %s)",
            stopped,
            stopped,
        )
        left[:] = rows[0]
        return not any(rows[0])

    try:
        await until(settled, timeout=c.config.settle_timeout, what="the load settled")
    except TimeoutError:
        parked, live, deliveries, firings = left
        return resumed, f"parked {parked}, live runs {live}, pending deliveries {deliveries}, open firings {firings}"
    return resumed, None


@contextlib.asynccontextmanager
async def _servers(kinds: Sequence[str]) -> AsyncIterator[tuple[Replicas, PrivatePostgres, asyncio.Future[Any]]]:
    """The primary, running; the standby and the side server, starting (in threads: the last item, to await)
    while the workers boot. All three are stopped at once on exit."""
    remote = SERVER_IP if "partition" in kinds else None
    with contextlib.ExitStack() as stack:
        if remote:
            stack.enter_context(faults.netns())
        pair = stack.enter_context(replicas(listen_also=remote, standby=False, cascade=True))
        side = stack.enter_context(private_postgres(listen_also=remote, start=False))

        def start_side() -> None:
            side.init()
            if remote:
                side.listen_also(remote)
            side.start()
            side.admin('CREATE DATABASE "nemesis"')

        threads = [asyncio.ensure_future(asyncio.to_thread(f)) for f in (pair.ensure_standby, start_side)]
        try:
            yield pair, side, asyncio.gather(*threads)
        finally:
            await asyncio.gather(*threads, return_exceptions=True)  # nothing torn down under a thread still at it
            servers = [pair.primary, pair.standby, pair.spare, side]
            await asyncio.gather(*(asyncio.to_thread(s.close) for s in servers if s is not None))


def available(kinds: Sequence[str]) -> tuple[list[str], list[str]]:
    """The kinds this machine can inject, and those it cannot (partition: root and iproute2; skew: libfaketime)."""
    can = [k for k in kinds if (k != "partition" or faults.netns_possible()) and (k != "skew" or FAKETIME)]
    return can, [k for k in kinds if k not in can]


async def _dump(group: Cluster, side: Cluster, injected: list[Fault], log_dir: Path) -> None:
    """What the checks read, as files beside the workers' logs (the servers are gone after the run)."""
    tables = {
        "effects": (side, "SELECT * FROM nem_effects ORDER BY at"),
        "spans": (side, "SELECT * FROM nem_spans ORDER BY started_at"),
        "runs": (
            group,
            "SELECT id, workflow, status, owner, epoch, created_at, finished_at, lease_until, wake_at, waiting_on "
            "FROM lockgate_runs",
        ),
        "journal": (
            group,
            "SELECT run_id, step_key, kind, status, output, started_at, finished_at FROM lockgate_journal",
        ),
        "workers": (group, "SELECT id, pid, started_at, stopped_at FROM lockgate_workers"),
        "flow_slots": (group, "SELECT * FROM lockgate_flow_slots"),
        "firings": (group, "SELECT * FROM lockgate_schedule_firings ORDER BY scheduled_at"),
        "domain_events": (group, "SELECT id, name, key, occurred_at FROM lockgate_events ORDER BY occurred_at"),
        "deliveries": (group, "SELECT * FROM lockgate_deliveries ORDER BY created_at"),
    }
    for name, (where, query) in tables.items():
        rows = await where.fetch(query)
        (log_dir / f"{name}.tsv").write_text("\n".join("\t".join(map(str, r)) for r in rows))
    (log_dir / "faults.tsv").write_text(
        "\n".join(f"{f.kind}\t{f.pid}\t{f.began}\t{f.ended}\t{f.cut}" for f in injected)
    )


async def nemesis(config: Config, log_dir: Path, *, say: bool = False, keep: bool = False) -> Report:
    """One run; the report of its checks. What they read is written to ``log_dir`` on a violation
    (always, with ``keep``)."""
    rng = random.Random(config.seed)
    async with _servers(config.kinds) as (pair, side, rest):
        db = pair.create_database("nemesis").rsplit("/", 1)[1].split("?")[0]
        c = _Cluster(pair, side, db, config, log_dir, Cluster(pair.url(db), log_dir))
        side_group = Cluster(c.side_url(False), log_dir)
        async with lg.Client(app, c.store(False)) as client:  # opening migrates the database
            try:
                c.spawn("plain")  # their boot (seconds of imports) overlaps the standby's and the side server's
                c.spawn("plain")
                if "partition" in config.kinds:
                    c.spawn("netns")
                if "skew" in config.kinds:
                    c.spawn("skew+30s")
                await rest
                await side_group.execute(SCHEMA)
                await c.group.ready(timeout=120)
                load = _Load(client, rng)
                stop = asyncio.Event()
                began = time.time()
                driver = asyncio.create_task(load.drive(config.rate, stop))
                nemeses = asyncio.create_task(_nemeses(c, load, rng, stop))
                if config.once:
                    await nemeses
                    await asyncio.sleep(1.0)
                else:
                    await asyncio.sleep(config.seconds)
                stop.set()
                injected = await nemeses
                await driver
                stopped = time.time()
                if c.rebuild is not None:
                    await c.rebuild
                if say:
                    arrived = len(load.arrivals)
                    print(f"load stopped after {stopped - began:.0f}s: {arrived} starts, {len(injected)} faults")
                resumed, unsettled = await _settle(c, client, stopped)
            except BaseException:
                await c.group.close()
                raise
        # The workers stop (gracefully: seconds on a loaded machine) while the checks read. All they read is
        # settled but scheduled runs begun after the load stopped, which the checks allow to be unfinished.
        closing = asyncio.ensure_future(c.group.close())
        try:
            lapsed = {(w.pid, run_id) for w in c.group.workers for run_id in LAPSED.findall(w.log())}
            report = await check(c.group, side_group, load.arrivals, load.events, injected, (began, stopped), lapsed)
            if report.violations or unsettled or keep:
                await _dump(c.group, side_group, injected, log_dir)
                rows = [f"{a.ticket}\t{a.workflow}\t{a.status}\t{a.run_id}\t{a.at}" for a in load.arrivals]
                (log_dir / "arrivals.tsv").write_text("\n".join(rows))
                (log_dir / "events.tsv").write_text("\n".join(f"{e}\t{n}\t{at}" for e, n, at in load.events))
        finally:
            await closing
    report.figures["load (s)"] = round(stopped - began, 1)
    report.figures["workers started"] = len(c.group.workers)
    report.figures["starts refused during outages"] = len(load.refused)
    report.figures["crash-looped runs resumed"] = resumed
    report.fail(f"not settled {config.settle_timeout:g}s after the load stopped", [unsettled] if unsettled else [])
    report.fail("tracebacks in worker logs", [w.name for w in c.group.workers if "Traceback" in w.log()])
    return report
