"""A router's share-to-share messages as export events (docs/export.md).

The transport records hops (``sent``/``delivered`` per road or lane); what
a flow cares about is the route, share to share, across every hop.  So the
router that makes a message records it ``routed``, the router it lands at
records it ``landed``, and any router that refuses it records ``refused``;
the Spark ``routed`` job joins them into latency and loss per route.

Recording costs nothing while no sink is set: :func:`record_routes` adds
listeners to the router's hooks (``routed``/``settled`` around a message
made here, ``landing``/``landed`` around a landing, ``refused``) and
removes them again with ``None``; with none installed each hook is one
attribute check -- the transport records the same way (flowcast.transport.hooks).

**Message ids.**  A parcel carries no id, and adding one would change the
wire.  It does carry the stamp its source router gave it, and parcels of
one (src, dst) pair travel in order.  So both ends name a message
``STAMP:N``: the stamp, and how many messages of that pair with the same
stamp this router saw before it (most stamps have one message; a flow
draining a queue in one tick gives several).  A message refused on the way
shifts the ``N`` of later ones with the same stamp at the far end; they
share the stamp, so latency (landed time - routed time) is still exact and
only which of them matched is not.  Stamps start again when a house
restarts, so the job matches each landing to the latest ``routed`` event
of its id at or before it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowcast.store import HouseLike

__all__ = ["RouteRecorder", "follow_house", "record_routes"]

_ROUTES = 4096  # per-pair id counters kept; beyond it they start again (ids need only the last stamp)
_NESTED = 64  # landings/dispatches in progress at once at most (a read answered in the same house nests one)


def _text(route: Any) -> str:
    # The export's route form (segments.route_text), inlined: this runs per message.
    return "/".join(route)


class RouteRecorder:
    """The listeners that record one router's messages into ``sink``."""

    def __init__(self, router: Any, sink: Any) -> None:
        self.router = router
        self.sink = sink
        self._seen: dict[tuple, list] = {}  # (src, dst) -> [last stamp, messages seen with it, src text, dst text]
        self._current: tuple[Any, str, int | None] | None = None  # (pair, id, size) of the message in hand
        self._outer: list[Any] = []  # _current of the dispatches this one is inside
        self._landings: list[tuple] = []  # landings in progress, innermost last
        self._installed = (
            ("routed", self.routed),
            ("settled", self.settled),
            ("landing", self.landing),
            ("landed", self.landed),
            ("refused", self.refused),
        )
        for name, listener in self._installed:
            router.hooks.add(name, listener)

    def detach(self) -> None:
        for name, listener in self._installed:
            self.router.hooks.discard(name, listener)

    def _route(self, pair: Any, stamp: float) -> tuple[str, list]:
        """The id of the next message of ``pair`` with ``stamp``, and the route's entry (its texts)."""
        key = (pair.src, pair.dst)
        seen = self._seen.get(key)
        if seen is None:
            if len(self._seen) >= _ROUTES:
                self._seen.clear()
            seen = self._seen[key] = [stamp, 0, _text(pair.src), _text(pair.dst)]
        elif seen[0] == stamp:
            seen[1] += 1
        else:
            seen[0] = stamp
            seen[1] = 0
        return f"{stamp!r}:{seen[1]}", seen

    def _texts(self, pair: Any) -> tuple[str, str]:
        seen = self._seen.get((pair.src, pair.dst))
        if seen is None:
            return _text(pair.src), _text(pair.dst)
        return seen[2], seen[3]

    def _packed(self, data: Any) -> int | None:
        try:
            return len(self.router._pack(data))
        except Exception:  # noqa: BLE001 - data kept within a house need not be packable
            return None

    # -- the listeners -----------------------------------------------------

    def routed(self, pair: Any, tag: str, stamp: float, data: Any) -> None:
        """A message made in this house starts its way: recorded once, here."""
        msg_id, seen = self._route(pair, stamp)
        size = self._packed(data)
        self.sink.message("routed", msg_id, seen[2], seen[3], size, detail=tag, share=pair.src.share)
        if len(self._outer) >= _NESTED:
            self._outer.clear()
        self._outer.append(self._current)
        self._current = (pair, msg_id, size)

    def settled(self, pair: Any) -> None:
        self._current = self._outer.pop() if self._outer else None

    def landing(self, pair: Any, tag: str, stamp: float, parcel: Any, offset: int, data: Any) -> None:
        current = self._current
        if current is not None and current[0] is pair:  # made in this house: as routed
            msg_id, size = current[1], current[2]
            src, dst = self._texts(pair)
        else:
            msg_id, seen = self._route(pair, stamp)
            size = len(parcel) - offset if parcel is not None else self._packed(data)
            src, dst = seen[2], seen[3]
        overflowed = self.router.counts["errors_overflowed"] if tag == "error" else 0
        if len(self._landings) >= _NESTED:
            self._landings.clear()
        self._landings.append((pair, msg_id, size, src, dst, overflowed, current))
        self._current = (pair, msg_id, size)  # for a refusal, should the landing fail

    def landed(self, pair: Any, tag: str) -> None:
        if not self._landings or self._landings[-1][0] is not pair:
            return
        _pair, msg_id, size, src, dst, overflowed, outer = self._landings.pop()
        self._current = outer
        if tag == "error" and self.router.counts["errors_overflowed"] != overflowed:
            # The report did not fit SHARE.error: dropped (and counted), not landed.
            detail = f"errors_overflowed: share {pair.dst.share + '.error'!r} is full"
            self.sink.message("refused", msg_id, src, dst, None, detail=detail, share=pair.dst.share)
            return
        self.sink.message("landed", msg_id, src, dst, size, detail=tag, share=pair.dst.share)

    def refused(self, pair: Any, tag: str, refused: Any) -> None:
        current = self._current
        msg_id = None
        if current is not None and current[0] is pair:
            msg_id = current[1]
            self._current = None  # one refusal per message
        if self._landings and self._landings[-1][0] is pair:
            self._landings.pop()  # the landing failed: this is its refusal
        src, dst = self._texts(pair)
        detail = f"{refused.counter}: {refused.reason}"
        self.sink.message("refused", msg_id, src, dst, None, detail=detail, share=pair.dst.share)


def record_routes(router: Any, sink: Any) -> RouteRecorder | None:
    """Record ``router``'s routed messages into ``sink`` (an export Recorder); None stops.

    A sink has the Recorder's ``message(kind, msg_id, src, dst, size,
    latency=None, *, detail=None, share=None, ...)``.
    """
    if router.route_recorder is not None:
        router.route_recorder.detach()
        router.route_recorder = None
    if sink is not None:
        router.route_recorder = RouteRecorder(router, sink)
    return router.route_recorder


def follow_house(house: HouseLike, sink: Any) -> Callable[[], None]:
    """A chore for the house's ticks that records its router, and the lane and roads it has, into ``sink``.

    A flow makes its router and stacks when it runs (``router setup``,
    ``lane setup``, ``road setup ... at enter``), after the recorder
    exists, so ``flowcast run --export`` cannot hand the sink over at
    start; an identity check a tick (and one per stack) is the cost.  Call
    it once before the house runs to record what is wired already.
    """
    recorded: list[Any] = [None]
    stacks: list[Any] = []  # the stacks given the sink: each once (giving it again would restart its records)

    def chore() -> None:
        router = house.router
        if router is None:
            return
        if router is not recorded[0]:
            router.set_events(sink)
            recorded[0] = router
        for stack in (router.lane, *router.roads.values()):
            if stack is not None and not any(stack is seen for seen in stacks) and hasattr(stack, "set_events"):
                stack.set_events(sink)
                stacks.append(stack)

    return chore
