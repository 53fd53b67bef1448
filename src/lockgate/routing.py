"""Which runs a worker takes: its labels, the workflows it is told to take, and the versions its code runs.

A workflow may require labels of the worker that executes it (``@app.workflow(runs_on=Labels(gpu="a100"))``);
a worker process says which labels it has and, optionally, which workflows (or ``queue:NAME``, a
queue's members) it takes or leaves (``Engine(labels=..., workflows=..., exclude=...)``, ``lockgate
serve --labels --workflows --exclude``). What it takes is the workflows it has code for, selected so,
whose labels it satisfies. For each, its code runs the runs stamped with the workflow's ``version`` or
one of its ``compatible_with``, whose recorded patches it declares: that is the worker's *offer*,
registered with the worker and used by its claims (in SQL) and by whoever asks which due runs no live
worker can take (``judge``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgument, UnknownWorkflow

__all__ = [
    "NO_VERSION",
    "Labels",
    "Offer",
    "RoutingGap",
    "Selection",
    "accepts",
    "claim_filter",
    "judge",
    "offers_for",
    "parse_offers",
    "taken",
]

NO_VERSION = ""  # a run (or code) with no version, in a claim key (a version is never empty)
_SEP = "\x1f"


class Labels(Mapping[str, str]):
    """A worker's labels, or the labels a workflow requires of its worker: non-empty strings to non-empty strings.

    ``Labels(gpu="a100", zone="eu")``, ``Labels({"gpu": "a100"})`` or ``Labels.parse("gpu=a100,zone=eu")``.
    """

    __slots__ = ("_items",)

    def __init__(self, labels: Mapping[str, str] | None = None, /, **more: str) -> None:
        given = {**(dict(labels) if labels is not None else {}), **more}
        for key, value in given.items():
            if not isinstance(key, str) or not key.strip():
                raise InvalidArgument(f"labels: a label's key must be a non-empty string, got {key!r}")
            if not isinstance(value, str) or not value.strip():
                raise InvalidArgument(f"labels: label {key!r} must have a non-empty string value, got {value!r}")
            if any(c in key + value for c in "=,"):
                raise InvalidArgument(f"labels: {key}={value} may not contain '=' or ','")
        self._items: dict[str, str] = {k.strip(): v.strip() for k, v in sorted(given.items())}

    @classmethod
    def parse(cls, text: str) -> Labels:
        """``"gpu=a100,zone=eu"`` (the form ``lockgate serve --labels`` takes); ``""`` is no labels."""
        pairs: dict[str, str] = {}
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            key, eq, value = part.partition("=")
            if not eq:
                raise InvalidArgument(f"labels: {part!r} is not KEY=VALUE")
            if key.strip() in pairs:
                raise InvalidArgument(f"labels: {key.strip()!r} given twice")
            pairs[key.strip()] = value.strip()
        return cls(pairs)

    def satisfies(self, required: Mapping[str, str]) -> bool:
        """Whether these labels include every one of ``required`` (same key, same value)."""
        return all(self._items.get(k) == v for k, v in required.items())

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Labels({', '.join(f'{k}={v!r}' for k, v in self._items.items())})"

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self._items.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))


@dataclass(frozen=True)
class Selection:
    """What a worker process is told to take: its labels, the workflows it takes (``None``: every one) and
    those it leaves. A name is a workflow's or ``queue:NAME`` (the queue's members)."""

    labels: Labels = field(default_factory=Labels)
    workflows: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        labels: Labels | Mapping[str, str] | str | None = None,
        workflows: str | Sequence[str] | None = None,
        exclude: str | Sequence[str] | None = None,
    ) -> Selection:
        """From an engine's options (a string is comma-separated, as ``lockgate serve`` takes them)."""
        if isinstance(labels, str):
            parsed = Labels.parse(labels)
        elif isinstance(labels, Labels):
            parsed = labels
        else:
            parsed = Labels(labels or {})
        return cls(parsed, None if workflows is None else _names(workflows, "workflows"), _names(exclude, "exclude"))

    @property
    def default(self) -> bool:
        """Everything the code has and no label: nothing restricts the claims but the versions."""
        return not self.labels and self.workflows is None and not self.exclude


def _names(value: str | Sequence[str] | None, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(n.strip() for n in items if isinstance(n, str) and n.strip())
    if len(names) != len([n for n in items if not isinstance(n, str) or n.strip()]):
        raise InvalidArgument(f"{what}: names must be non-empty strings, got {value!r}")
    return names


def taken(defs: Mapping[str, Any], queues: Iterable[str], selection: Selection) -> list[str]:
    """The workflows (of ``defs``, by name) a worker with ``selection`` takes, in declaration order.

    A name in ``workflows`` or ``exclude`` that the app does not define is ``UnknownWorkflow``; a queue
    that it does not declare, ``InvalidArgument``.
    """
    known_queues = set(queues)

    def expand(names: tuple[str, ...]) -> set[str]:
        out: set[str] = set()
        for name in names:
            if name.startswith("queue:"):
                queue = name.removeprefix("queue:")
                if queue not in known_queues:
                    declared = sorted(known_queues) or "(none)"
                    raise InvalidArgument(f"no queue {queue!r} in this app; declared: {declared}")
                out |= {n for n, d in defs.items() if getattr(d, "queue", None) == queue}
            elif name not in defs:
                raise UnknownWorkflow(name, defs)
            else:
                out.add(name)
        return out

    chosen = set(defs) if selection.workflows is None else expand(selection.workflows)
    chosen -= expand(selection.exclude)
    return [n for n, d in defs.items() if n in chosen and selection.labels.satisfies(getattr(d, "runs_on", {}))]


@dataclass(frozen=True)
class Offer:
    """What a worker's code runs of one workflow: runs stamped with one of ``versions`` (``NO_VERSION``: none)
    whose recorded patches are all among ``patches``."""

    versions: tuple[str, ...]
    patches: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"versions": list(self.versions), "patches": list(self.patches)}


def offers_for(defs: Mapping[str, Any], names: Iterable[str]) -> dict[str, Offer]:
    """The offer of each taken workflow, from its definition (``version``, ``compatible_with``, ``patches``)."""
    out: dict[str, Offer] = {}
    for name in names:
        d = defs[name]
        versions = (d.version or NO_VERSION, *d.compatible_with)
        out[name] = Offer(tuple(dict.fromkeys(versions)), tuple(d.patches))
    return out


def claim_filter(offers: Mapping[str, Offer]) -> tuple[str, str]:
    """The claim's parameters as JSON: the ``workflow<US>version`` keys it takes, and each workflow's patches."""
    keys = [f"{wf}{_SEP}{v}" for wf, offer in offers.items() for v in offer.versions]
    return json.dumps(keys), json.dumps({wf: list(offer.patches) for wf, offer in offers.items()})


def accepts(offer: Mapping[str, Any] | Offer, version: str | None, patches: Sequence[str]) -> bool:
    """Whether code offering ``offer`` runs a run stamped ``version`` with ``patches`` (the claim's rule)."""
    versions = offer.versions if isinstance(offer, Offer) else offer.get("versions", ())
    known = offer.patches if isinstance(offer, Offer) else offer.get("patches", ())
    return (version or NO_VERSION) in versions and set(patches) <= set(known)


@dataclass(frozen=True)
class RoutingGap:
    """Due runs of one workflow, version and patches that no live worker takes.

    ``reason``: ``version`` (live workers take the workflow, but their code runs other versions or lacks a
    recorded patch) or ``worker`` (no live worker takes the workflow: its labels, ``--workflows``,
    ``--exclude``, or no worker at all). ``offered``: the versions live workers offer for it.
    ``due_for``: seconds since the oldest of them became due; ``reported``: past the threshold.
    """

    workflow: str
    version: str | None
    patches: list[str]
    runs: int
    due_for: float
    reason: str
    offered: list[str]
    reported: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "version": self.version,
            "patches": self.patches,
            "runs": self.runs,
            "due_for": self.due_for,
            "reason": self.reason,
            "offered": self.offered,
            "reported": self.reported,
        }


def judge(
    groups: Iterable[Mapping[str, Any]], live_offers: Iterable[Mapping[str, Any]], now: float, after: float
) -> list[RoutingGap]:
    """The groups of due, unheld runs (``workflow, version, patches, n, oldest``) that no live worker's offer
    (each a mapping of workflow to ``{"versions", "patches"}``) takes; ``reported`` once due ``after`` s."""
    offers = list(live_offers)
    gaps: list[RoutingGap] = []
    for g in groups:
        wf, version = g["workflow"], g["version"]
        patches = _patch_list(g.get("patches"))
        mine = [o[wf] for o in offers if wf in o]
        if any(accepts(o, version, patches) for o in mine):
            continue
        offered = sorted({v for o in mine for v in o.get("versions", ())})
        due_for = max(0.0, now - float(g["oldest"]))
        reason = "version" if mine else "worker"
        gaps.append(RoutingGap(wf, version, patches, int(g["n"]), due_for, reason, offered, due_for >= after))
    return gaps


def _patch_list(value: Any) -> list[str]:
    if not value:
        return []
    parsed = json.loads(value) if isinstance(value, str) else value
    return [str(p) for p in parsed]


def parse_offers(value: Any) -> dict[str, Any]:
    """A worker row's ``offers`` column as a mapping (``{}`` when it registered none: older code)."""
    if not value:
        return {}
    parsed = json.loads(value) if isinstance(value, str) else value
    return dict(parsed)
