"""Stock routing behaviours: wire stacks and send routed messages from flows.

    do router setup with estate "alpha" yard "manor" at enter
    do road setup with channel "main" port 7530 keep "keeps/alpha" acceptance "once" at enter
    do road join with channel "main" host "127.0.0.1" port 7531 at enter
    do route send from ping.out with dst "ping@.beta" tag "ping"

A house started from an estate layout is wired already; its flows use only
``route send`` (and ``router status``); ``dst`` because ``to`` is a FloScript connective.  Arriving messages need no
behaviour: the router lands them in their shares.
"""

from __future__ import annotations

from flowcast.behaving.registry import Io, behaviour
from flowcast.routing.route import Route
from flowcast.routing.wiring import join_remote, wire_lane, wire_road, wire_router
from flowcast.store import HouseLike


def _house(io: Io) -> HouseLike:
    if io.house is None:
        raise ValueError("routing behaviours need a running House (io.house is None)")
    return io.house


@behaviour("router.setup")
def router_setup(io: Io, estate: str, yard: str, manor: str = "", channel: str = "main", policy: str = "") -> None:
    """Give the house its router; ``manor`` defaults to this yard.

    ``policy`` is a YAML file holding a list of rules (docs/routing.md);
    without one the router lets no road traffic in.
    """
    rules: list = []
    if policy:
        import yaml

        with open(policy, encoding="utf-8") as handle:
            rules = yaml.safe_load(handle) or []
        if not isinstance(rules, list):
            raise ValueError(f"{policy}: a policy file holds a list of rules")
    wire_router(_house(io), estate=estate, yard=yard, manor=manor or yard, default_channel=channel, policy=rules)


@behaviour("lane.setup")
def lane_setup(io: Io, dir: str, yards: str = "") -> None:
    """Join the estate's lane in ``dir``; ``yards`` lists the other yards, space-separated.

    Unauthenticated (it trusts socket paths): a flow script has no
    supervisor to hand it lane keys.  Houses run from a layout
    (``flowcast run ESTATE.yaml``) always authenticate.
    """
    wire_lane(_house(io), dir, yards.split(), keys=None)


@behaviour("road.setup")
def road_setup(
    io: Io, keep: str, channel: str = "main", host: str = "127.0.0.1", port: int = 0, acceptance: str = "once", role: str = ""
) -> None:
    """Open a road for the manor (its keep directory, UDP address, acceptance policy)."""
    wire_road(_house(io), channel, keep=keep, host=host, port=port, acceptance=acceptance, role=role or None)


@behaviour("road.join")
def road_join(io: Io, port: int, host: str = "127.0.0.1", channel: str = "main") -> None:
    """Introduce this estate to the one at ``host:port``."""
    join_remote(_house(io), channel, host, port)


@behaviour("route.send")
class RouteSend:
    """Send the input share to ``to`` whenever it changed since the last send.

    A value share goes as its fields (landing as a field update at the
    other end); a queue share is drained, one routed message per item
    (sent together as batch parcels: flowcast.routing.batch).
    Errors come back to the queue share ``SOURCE.error``.
    """

    def __init__(self, io: Io, dst: str, tag: str = "") -> None:
        if io.input is None:
            raise ValueError("route send needs a share to send: 'do route send from SHARE with dst ROUTE'")
        self.io = io
        self.to = Route.parse(dst)
        if not self.to.share:
            raise ValueError(f"route {dst!r} names no share")
        self.tag = tag
        self.sent_version = 0

    def __call__(self) -> None:
        share = self.io.input
        router = _house(self.io).router
        if router is None:
            raise ValueError("this house has no router")
        queue = getattr(share, "queue", None)
        if queue is not None:
            if queue:  # every message goes, as its own, but on the way as few parcels (Router.send_many)
                values = list(queue)
                queue.clear()
                router.send_many(self.to, values, src=share.name, tag=self.tag)
            return
        if share.version == self.sent_version:  # not the stamp: two updates in one tick share it
            return
        self.sent_version = share.version
        router.send(self.to, share.fields(), src=share.name, tag=self.tag)


@behaviour("router.status")
def router_status(io: Io) -> None:
    """Copy the router's counters into the output share (fields by counter name)."""
    share = io.output
    router = _house(io).router
    if share is None or router is None:
        raise ValueError("router status needs a router and an output share: 'do router status to SHARE'")
    share.update(dict(router.counts))
