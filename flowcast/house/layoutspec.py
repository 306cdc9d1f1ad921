"""What an estate layout is: its keys, bounds and defaults, and the validated model.

The schema is in docs/layouts.md; :mod:`~flowcast.house.layoutread` checks a
file against these, :mod:`~flowcast.house.layout` loads and plans.  Apart
so that a supervisor or a status reader can hold a layout's model without
the reader that builds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from flowcast.flow.errors import FlowError, FlowErrors, Where
from flowcast.transport.keep import Acceptance

__all__ = [
    "ACCEPTANCES",
    "DEFAULT_DRAIN",
    "ACCESSES",
    "EstateLayout",
    "HouseEntry",
    "HousePlan",
    "LayoutError",
    "RemoteSpec",
    "RoadSpec",
    "RuleSpec",
]

#: Acceptance policies of a road, as the keep knows them.
ACCEPTANCES: tuple[str, ...] = tuple(a.value for a in Acceptance)
#: What a policy rule grants or refuses (``subscribe``: CAST's permission, docs/cast.md; ``causal``: fetches, docs/causal.md).
ACCESSES: tuple[str, ...] = ("write", "read", "any", "subscribe", "causal")
#: Channel and yard names: short, no dots (a dot separates share path parts
#: and yard names are the stems of lane socket files).
LOCAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}\Z")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_ROLE = "estate"
DEFAULT_ACCEPTANCE = "once"
#: Upper bound of an entry's fixed ``count``: a typo must not fork a million processes.
MAX_COUNT = 1024
#: Most house processes one plan may ask for (a guard against a typo like 10**9).
MAX_PLAN = 65536
#: Longest glob in a policy rule and longest path (flow, keep, run) accepted.
MAX_GLOB = 256
MAX_PATH = 4096
#: A layout is a few hundred bytes; a huge file is a mistake or an attack.
MAX_FILE_BYTES = 1 << 20
#: Errors listed before the rest are summarised in one line.
MAX_ERRORS = 100

TOP_KEYS = ("estate", "role", "keep", "run", "roads", "policy", "houses", "cast", "causal", "export", "period", "drain", "shares")
#: Seconds between a house's ticks (its skedder's period), when the layout gives one: a millisecond to a minute.
PERIOD = (0.001, 60.0)
#: Seconds a stopping house lets its stacks flush (``drain:``, per estate or per house entry): none to ten minutes.
DRAIN = (0.0, 600.0)
#: The drain when the layout gives none: long enough for a lane or a loopback road to answer many
#: times over (a round trip is well under a millisecond), short enough that a stop with a dead peer
#: is still a stop a person waits for.
DEFAULT_DRAIN = 3.0
#: A road's whole-number options (bytes, seconds, messages), with their ranges: mostly bounds on what it holds for peers.
LIMIT_KEYS = {
    "hold_budget": (1 << 20, 1 << 40),  # bytes held for order or reassembly, all sessions together
    "incomplete_after": (1, 86_400),  # seconds an incomplete message waits for its next piece
    "idle_after": (10, 7 * 86_400),  # seconds of silence before a session is reaped
    "backlog_messages": (1, 10_000_000),  # messages waiting for one remote that is down
    "backlog_bytes": (1 << 16, 1 << 40),  # and their bytes
    "send_queue_bytes": (1 << 16, 1 << 40),  # bytes waiting for one remote with a live session
    "reply_bytes": (1 << 10, 1 << 30),  # bytes a second of replies to addresses not yet proven (cookies), in all
    "reply_source_bytes": (64, 1 << 30),  # and to any one such address
    "max_message": (1 << 16, 1 << 32),  # bytes of one message, either way (and what decoding one can make: ~72 per byte)
    # Not a hold: the UDP payload of each datagram, for every remote of the road.  Not given: per remote,
    # what the port carries on loopback and 1,232 bytes to another host (transport/roadmtu.py).
    "datagram_size": (512, 65527),
}
ROAD_KEYS = ("host", "port", "acceptance", "remotes", *LIMIT_KEYS)
REMOTE_KEYS = ("estate", "host", "port")
RULE_KEYS = ("allow", "deny", "estate", "role", "share", "tag", "channel")
HOUSE_KEYS = ("name", "flow", "house", "manor", "count", "drain")


@dataclass(frozen=True)
class RemoteSpec:
    """An estate a road joins when it starts (the joiner side of RAET's join)."""

    estate: str
    host: str
    port: int
    where: Where | None = field(default=None, compare=False)


@dataclass(frozen=True)
class RoadSpec:
    """One UDP channel of the estate: where it listens and whom it admits/joins."""

    channel: str
    host: str
    port: int  #: 0: any free port (the bound port is reported at run time)
    acceptance: str  #: never | once | always -- what a join from an unknown key does
    remotes: tuple[RemoteSpec, ...] = ()
    where: Where | None = field(default=None, compare=False)
    #: What the road may hold for its peers (transport/budget.py): only the keys the layout gave.
    limits: tuple[tuple[str, int], ...] = ()

    def stack_options(self) -> dict[str, int]:
        """Keyword arguments for the RoadStack (its defaults stand for keys not given)."""
        return dict(self.limits)


@dataclass(frozen=True)
class RuleSpec:
    """One authorization rule for traffic arriving by road; the first match decides.

    Every pattern is an :mod:`fnmatch` glob matched against the route of the
    message: the sending ``estate`` and its ``role``, the dotted ``share``
    name, the message ``tag`` and the ``channel`` it came in on.
    """

    effect: Literal["allow", "deny"]
    access: Literal["write", "read", "any"]
    estate: str = "*"
    role: str = "*"
    share: str = "*"
    tag: str = "*"
    channel: str = "*"
    where: Where | None = field(default=None, compare=False)


@dataclass(frozen=True)
class HouseEntry:
    """Which flow (and which house of it) some of the estate's houses run.

    ``flow`` is absolute so the plan does not depend on the directory a
    supervisor happens to run in.
    """

    name: str
    flow: Path
    house: str | None = None  #: house of the flow file; None: its first
    manor: bool = False
    count: int | Literal["auto"] = 1
    where: Where | None = field(default=None, compare=False)
    #: Seconds its houses drain when they stop (``drain:`` of the entry); None: the estate's.
    drain: float | None = None


@dataclass(frozen=True)
class EstateLayout:
    """A validated estate layout: everything a supervisor needs to start it."""

    path: Path
    estate: str
    role: str
    keep: Path
    run: Path
    #: by channel name, in file order.  Not part of the hash (a dict cannot be hashed).
    roads: dict[str, RoadSpec] = field(default_factory=dict, hash=False)
    policy: tuple[RuleSpec, ...] = ()
    houses: tuple[HouseEntry, ...] = ()
    #: The ``cast:`` section (flowcast.house.layoutcast.CastSpec); None: this estate runs no CAST.
    cast: Any = field(default=None, hash=False)
    #: The ``causal:`` section (flowcast.house.layoutcausal.CausalSpec); None: this estate relays no topics.
    causal: Any = field(default=None, hash=False)
    #: The ``export:`` section's directory (flowcast.house.layoutexport); None: houses record nothing.
    export: Path | None = None
    #: Seconds between every house's ticks (``period:``); None: ``flowcast run --period``, else 0.125.
    period: float | None = None
    #: Seconds every house drains when it stops (``drain:``); None: DEFAULT_DRAIN.  An entry's own wins.
    drain: float | None = None
    #: The ``shares:`` section (flowcast.house.layoutshares.SharesSpec): queue budgets, read limits; None: defaults.
    shares: Any = field(default=None, hash=False)

    def drain_of(self, entry: HouseEntry) -> float:
        """How long a house of ``entry`` lets what is in flight finish when it stops."""
        if entry.drain is not None:
            return entry.drain
        return self.drain if self.drain is not None else DEFAULT_DRAIN

    @property
    def manor(self) -> HouseEntry:
        """The entry whose (single) house is the manor: it owns the roads."""
        for entry in self.houses:
            if entry.manor:
                return entry
        raise ValueError("layout has no manor house")  # load_layout never builds one


@dataclass(frozen=True)
class HousePlan:
    """One house process to start: its yard name and what it runs."""

    yard: str
    entry: HouseEntry
    manor: bool


class LayoutError(FlowErrors):
    """Every problem found in a layout, each located; ``str`` lists them all.

    A :class:`~flowcast.flow.errors.FlowErrors`, so whatever already prints
    flow-script errors prints layout errors the same way.
    """

    def __init__(self, errors: list[FlowError], path: Path | str | None = None) -> None:
        super().__init__(errors)
        self.path = None if path is None else Path(path)
