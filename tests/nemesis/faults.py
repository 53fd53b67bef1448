"""The nemeses: what each one does to the cluster, and the record of each fault it injected.

``kill`` (``kill -9`` of a worker, a new one started in its place), ``stop`` (SIGSTOP past the
lease, then SIGCONT), ``partition`` (the worker in a network namespace of its own loses its veth
link for a while), ``skew`` (a worker under libfaketime, ±30 s, replaced by one skewed the
other way), ``failover-sync`` and ``failover-async`` (the primary killed and the standby
promoted; asynchronous: the standby cut off a second earlier, so it is behind), ``restart``
(the primary stopped ``-m immediate`` and started again during a burst of starts).
"""

from __future__ import annotations

import asyncio
import glob
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["FAKETIME", "KINDS", "NS", "SERVER_IP", "Fault", "netns"]

KINDS = ("kill", "stop", "partition", "skew", "failover-sync", "failover-async", "restart")
WORKER_FAULTS = {"kill", "stop", "partition", "skew"}  # the others hit the database (every worker)

FAKETIME = next(iter(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")), None)
# Named after this process, by its whole pid: runs side by side (a long one and the suite's) keep apart. (By the
# pid modulo 250, two runs started together once took the same link names and address, and neither's worker could
# reach the server.) A /30 of its own per pid: 64 in each /24 of 10.200.0.0/13 (unique for pids below 2**17).
_ME = os.getpid()
NS, HOST, PEER = f"lgnem{_ME}", f"lgn{_ME}h", f"lgn{_ME}p"
_SUBNET, _BASE = f"10.{200 + (_ME >> 14) % 8}.{(_ME >> 6) & 0xFF}", (_ME & 0x3F) * 4
SERVER_IP, WORKER_IP = f"{_SUBNET}.{_BASE + 1}", f"{_SUBNET}.{_BASE + 2}"


@dataclass
class Fault:
    """One fault: its kind, the worker it hit (pid; 0 for the database), when it began and ended (time.time())."""

    kind: str
    pid: int
    began: float
    ended: float
    cut: float = 0.0  # failover-async: every commit acknowledged before this the standby has; later, maybe not


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=30)


def netns_possible() -> bool:
    return os.geteuid() == 0 and subprocess.run(["which", "ip"], capture_output=True).returncode == 0


@contextmanager
def netns() -> Iterator[None]:
    """A network namespace reaching the host at ``SERVER_IP`` over a veth pair (removed on exit)."""
    _sh("ip", "link", "del", HOST, check=False)  # a leftover of an interrupted run
    _sh("ip", "netns", "del", NS, check=False)
    try:
        _sh("ip", "netns", "add", NS)
        _sh("ip", "link", "add", HOST, "type", "veth", "peer", "name", PEER)
        _sh("ip", "link", "set", PEER, "netns", NS)
        _sh("ip", "addr", "add", f"{SERVER_IP}/30", "dev", HOST)
        _sh("ip", "link", "set", HOST, "up")
        _sh("ip", "netns", "exec", NS, "ip", "addr", "add", f"{WORKER_IP}/30", "dev", PEER)
        _sh("ip", "netns", "exec", NS, "ip", "link", "set", PEER, "up")
        _sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
        yield
    finally:
        _sh("ip", "link", "del", HOST, check=False)
        _sh("ip", "netns", "del", NS, check=False)


def link(up: bool) -> None:
    _sh("ip", "link", "set", HOST, "up" if up else "down")


def in_netns() -> list[str]:
    return ["ip", "netns", "exec", NS]


def skewed(offset: str) -> list[str]:
    """The command prefix running a worker with its clock ``offset`` off (``+30s``)."""
    assert FAKETIME is not None
    return ["env", f"LD_PRELOAD={FAKETIME}", f"FAKETIME={offset}"]


def freeze(pid: int, frozen: bool) -> None:
    os.kill(pid, signal.SIGSTOP if frozen else signal.SIGCONT)


async def pause(seconds: float, stop: asyncio.Event) -> bool:
    """Wait ``seconds``, or less if ``stop`` is set; whether ``stop`` was set."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True
