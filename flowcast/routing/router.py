"""The Router: moves routed messages between shares, lanes and roads.

One router per house.  A message for a share in this house lands in it; for
another yard of this estate it goes down the lane; for another estate it
goes to the manor (the house that runs the roads), which sends it on the
road named by the route's channel.  Arrivals take the same path backwards.

What the router trusts, and why:

* A lane's yards are this estate's own processes (0600 sockets, known
  names); they may write any share, but a yard may not claim to be another
  yard of this estate.
* A road's remote is authenticated by the transport.  Its messages must name
  that remote as their source estate (no relaying through a third estate),
  must be addressed to this estate, and must pass the policy; their source
  channel is set to the road they came in on, so replies and errors go back
  the same way.  A reply (``error``, ``value``) to a share that sent to that
  estate needs no rule: a sender must hear about its own messages.

What a tag means is not the router's business: tags with a meaning
(``read``, ``error``, and those layers above add) have handlers, registered
with :meth:`Router.handle` (flowcast.routing.handlers); every other tag lands
as data.

Anything refused or undeliverable is counted, and -- unless it was itself an
error report -- answered with an ``error`` message routed back to its
source share, where it lands in ``SHARE.error``.  A router never raises for
what arrives.

On the hot path a message is a parcel (flowcast.routing.parcel): a manor
reads its header and forwards the bytes it got; each route pair is
validated once and cached with everything derived from it.
"""

from __future__ import annotations

import logging
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgpack

from flowcast.errors import ClosedError
from flowcast.routing.forward import Forwards
from flowcast.routing.refusals import refuse, refuse_raw
from flowcast.routing.parcel import HEADER_LIMITS, MAX_HEADER, ParcelError, encode, pack_ext, readdress, split_ext_map
from flowcast.routing.batch import BATCH_KEY, batch_count, check_array, land_batch, send_batch
from flowcast.routing.handlers import ERROR_QUEUE_BOUND, envelope  # noqa: F401 - re-exported
from flowcast.routing.handlers import UNSET as _UNSET
from flowcast.routing.handlers import ACCESS_REPLY, Handler, Landing, Refused, builtin_handlers, check_access, check_tag, land
from flowcast.routing.admit import admit
from flowcast.routing.denials import Denials
from flowcast.routing.hold import Hold, hold, release
from flowcast.routing.pair import Pair as _Pair
from flowcast.routing.snapshot import snapshot
from flowcast.routing.replies import MAX_ERROR_PARCEL, REPLY_WINDOW, ReplyBook  # noqa: F401 - re-exported
from flowcast.routing.policy import Policy
from flowcast.routing.policyshare import POLICY_PROBLEM_SHARE, POLICY_SHARE, follow_policy_share
from flowcast.routing.route import Route
from flowcast.routing.nearmiss import NearMiss
from flowcast.routing.allowance import RoadAllowance
from flowcast.routing.roadattach import attach, presence_share
from flowcast.runtime.clock import RealClock
from flowcast.transport.hooks import Hooks
from flowcast.transport.road import BACKLOG_FULL, SEND_QUEUE_FULL

__all__ = ["Router", "envelope", "POLICY_SHARE", "POLICY_PROBLEM_SHARE", "presence_share", "ERROR_QUEUE_BOUND", "REPLY_TAGS"]

log = logging.getLogger("flowcast.routing")

#: The built-in reply tags (handlers with access "reply", flowcast.routing.handlers).
REPLY_TAGS = ("error", "value")
#: Bytes of parcels held at most for estates that have not joined (besides the count).
HOLD_BYTES = 32 << 20
_PAIRS = 4096  # route pairs cached (and counted) per router; full: the cache starts again
_u32 = struct.Struct(">I").unpack_from
_unpackb = msgpack.unpackb


_Refused = Refused  # the router's name for it


class Router:
    """Route messages for one house (yard ``yard`` of estate ``estate``).

    ``manor`` names the estate's manor yard; the manor is the house that
    runs roads.  ``policy`` decides road traffic (default: an empty policy,
    which denies every road message).  ``default_channel`` is the road a
    route with no channel takes.

    A message for an estate its road does not know yet is held (at most
    ``hold_limit`` messages and ``hold_bytes`` bytes of parcels, each at most
    ``hold_timeout`` seconds) and sent
    when that estate joins: houses start in any order, and a flow should
    not have to watch presence before its first send.  Holding needs the
    ``scheduler`` (for the timeout); without one the message is refused
    at once with ``no_remote``.
    """

    def __init__(
        self,
        store: Any,
        *,
        estate: str,
        yard: str,
        manor: str | None = None,
        policy: Policy | None = None,
        default_channel: str = "main",
        now: Callable[[], float] | None = None,
        scheduler: Any = None,
        hold_timeout: float = 10.0,
        hold_limit: int = 10_000,
        hold_bytes: int = HOLD_BYTES,
    ) -> None:
        self.store = store
        self.estate = estate
        self.yard = yard
        self.manor = manor if manor is not None else yard
        self.is_manor = self.manor == yard
        self.policy = policy if policy is not None else Policy()
        self.default_channel = default_channel
        self.now = now if now is not None else (lambda: store.stamp)
        self.scheduler = scheduler
        self.hold_timeout = hold_timeout if scheduler is not None else 0.0
        self.hold_limit = hold_limit
        self.hold_bytes = hold_bytes
        self.lane: Any = None
        self.roads: dict[str, Any] = {}
        self._allowances: dict[str, RoadAllowance] = {}  # per road: what each estate may send on it (allowance.py)
        self.keeps: dict[Any, Any] = {}  # keep directory -> Keep, shared by the roads
        self.counts: Counter[str] = Counter()
        self._pack = msgpack.Packer(use_bin_type=True).pack  # one per router: a house is one thread
        self._pairs: dict[tuple, _Pair] = {}  # (src, dst) as tuples -> pair
        self._sends: dict[tuple[Any, str], _Pair] = {}  # (dst as given, src share) -> pair
        # The scheduler's clock, so a simulated run is a trace of its seed; a
        # router with no scheduler (no simulated run has none) keeps a real one.
        self._clock = scheduler.clock.now if scheduler is not None else RealClock().now
        self.denials = Denials(self._clock, self.counts, log)
        self.near_miss = NearMiss(self._clock)  # did you mean, for a message to a share not here
        self._held = Hold()
        self._replies = ReplyBook(self._clock, self.manor, self.counts, _PAIRS)
        self._hold_timer: Any = None
        self._handlers: dict[str, Handler] = builtin_handlers()
        self._forwards = Forwards(yard)  # share -> the yard its arrivals naming no yard go on to
        #: Where others hear of messages: ``routed`` (made here) and ``settled`` (its dispatch
        #: ended), ``landing``/``landed`` around a landing, ``refused``.  See flowcast.routing.events.
        self.hooks = Hooks(("routed", "settled", "landing", "landed", "refused"), f"router {yard}", direct=False)
        self.route_recorder: Any = None
        follow_policy_share(self)

    # -- wiring ----------------------------------------------------------------

    def attach_lane(self, lane: Any) -> None:
        """Use ``lane`` (a LaneStack) for the other yards of this estate."""
        self.lane = lane
        lane.hooks.add("message", self._from_lane)
        lane.hooks.add("done", self._done)

    def attach_road(self, channel: str, road: Any) -> None:
        """Use ``road`` (a RoadStack) for channel ``channel``; only the manor runs roads."""
        if not self.is_manor:
            raise ValueError(f"yard {self.yard!r} is not the manor ({self.manor!r}): only the manor runs roads")
        Route.make(channel=channel)
        self.roads[channel] = road
        self._allowances[channel] = attach(self, channel, road)

    def set_events(self, sink: Any) -> None:
        """Record routed messages (``routed``, ``landed``, ``refused``) into ``sink``, an
        export Recorder; None stops.  Without a sink nothing is paid: see flowcast.routing.events."""
        from flowcast.routing.events import record_routes

        record_routes(self, sink)

    def handle(self, tag: str, handler: Callable[[Landing], None], *, access: str = "write") -> None:
        """Call ``handler`` with each message of ``tag`` that arrives for a share of this house.

        ``access`` is the policy check a road arrival of this tag passes
        before the handler runs (see flowcast.routing.handlers).  A tag has
        one handler: registering it again is a ValueError, since two layers
        giving one tag two meanings is a mistake to hear of at start.
        """
        if not callable(handler):
            raise ValueError(f"handler for tag {tag!r} is not callable")
        self._register(tag, handler, access)

    def _register(self, tag: str, handler: Callable[[Landing], None] | None, access: str) -> None:
        check_tag(tag)
        check_access(access)
        if access == ACCESS_REPLY:  # an answer passes with no rule: only error and value may
            raise ValueError("reply access is the router's own (error, value); a new tag is checked as write, read or a declared permission")
        if tag in self._handlers:
            raise ValueError(f"tag {tag!r} already has a handler")
        self._handlers[tag] = Handler(handler, access)

    def declare(self, tag: str, *, access: str) -> None:
        """Check road arrivals of ``tag`` as ``access`` although no handler here takes them.

        For a tag whose handler is in another house of the estate: the
        manor checks the policy of every road arrival, so it must know the
        permission the tag needs even when it only passes the message on
        (:meth:`forward`).  Here it lands as data would.  ``unhandle``
        removes the declaration; a tag has one handler or declaration.
        """
        self._register(tag, None, access)

    def forward(self, share: str, yard: str) -> None:
        """Pass messages for ``share`` that name no yard (``share@.estate``: the manor) on to ``yard``.

        So a service whose remotes address the estate can live in any of its
        houses: the manor admits each arrival by its policy as usual (with
        the tag's declared access, :meth:`declare`) and sends it down the
        lane with the yard filled in; answers go back from that house by
        the usual way.  Only the manor receives such messages.
        """
        if not self.is_manor:
            raise ValueError(f"yard {self.yard!r} is not the manor ({self.manor!r}): only the manor receives what names no yard")
        self._forwards.add(share, yard)

    def unforward(self, share: str) -> bool:
        """Stop passing ``share`` on: its messages land here again."""
        return self._forwards.remove(share)

    @property
    def forwards(self) -> dict[str, str]:
        """Share -> the yard this manor passes it on to (a copy)."""
        return self._forwards.copy()

    def unhandle(self, tag: str, handler: Callable[[Landing], None] | None = None) -> bool:
        """Stop handling ``tag`` (only if its handler is ``handler``, when given): a closed service hears nothing more.

        After this a message of ``tag`` lands as data again would, so a
        service is closed for good or replaced, in the same house, by one
        that handles the tag anew (a restarted CAST or causal service).
        """
        found = self._handlers.get(tag)
        if found is None or (handler is not None and found.handler != handler):
            return False
        del self._handlers[tag]
        return True

    def answer(self, pair: Any, data: Any, *, tag: str = "value", ext: Mapping[str, Any] | None = None, packed: bytes | None = None) -> bool:
        """Send ``data`` back along ``pair`` (a message that arrived), from its destination share (``packed``: as packed already)."""
        if tag.__class__ is not str or len(tag) > 64:
            raise ValueError("tag must be a string of at most 64 characters")
        src, dst = pair.src, pair.dst
        here = Route(dst.share, self.yard, self.estate, src.channel)
        return self._send_pair(self._pair(here, src), tag, data, True, ext, packed)

    # -- route pairs ---------------------------------------------------------------

    def _pair(self, src: Route, dst: Route, key: tuple | None = None) -> _Pair:
        pairs = self._pairs
        found = pairs.get((src, dst) if key is None else key)
        if found is not None:
            return found
        pair = _Pair(src, dst)
        if len(pairs) >= _PAIRS:
            # Bounded whatever a remote sends: start again (route counts and
            # cached sends go; expectations hold their own pairs).
            pairs.clear()
            self._sends.clear()
            self.counts["route_cache_resets"] += 1
        pairs[(src, dst)] = pair
        if key is not None and key != (src, dst):
            pairs[key] = pair
        return pair

    # -- sending -----------------------------------------------------------------

    def send(
        self,
        dst: Route | str,
        data: Any,
        *,
        src: str = "",
        tag: str = "",
        reliable: bool = True,
        ext: Mapping[str, Any] | None = None,
    ) -> bool:
        """Route ``data`` from share ``src`` of this house to ``dst``.

        ``ext`` is a map of header extensions (flowcast.routing.parcel).
        Returns False when the router refused it at once (the reason is
        counted and, when ``src`` names a share, delivered to ``src.error``);
        True means it is on its way.  Bad arguments raise: they are the
        caller's mistake, not the network's.
        """
        pair = self._sends.get((dst, src))
        if pair is None:
            pair = self._resolve(dst, src)
        if tag.__class__ is not str or len(tag) > 64:
            raise ValueError("tag must be a string of at most 64 characters")
        self.counts["sent"] += 1
        if ext is None and self.hooks.routed is None:  # the common case, inlined
            return self._dispatch(pair, tag, self.now(), None, 0, data, reliable)
        return self._send_pair(pair, tag, data, reliable, ext)

    def send_many(self, dst: Route | str, values: Iterable[Any], *, src: str = "", tag: str = "", reliable: bool = True) -> int:
        """Route each of ``values`` from share ``src`` to ``dst``, in order: many messages, sent as few.

        What a flow draining a queue calls: each value is a message of its
        own where it lands (a queue share gets every one), but on the way
        they travel as batch parcels, so the houses in between pay per batch
        (flowcast.routing.batch says what is sent one by one instead).
        Returns how many are on their way; the rest were refused at once,
        counted and reported to ``src.error`` with their ``count`` -- a value
        that cannot be packed too (``unpackable``), where :meth:`send`
        raises: a drained queue must not be lost to one bad item.  Bad
        arguments raise, as for :meth:`send`.
        """
        pair = self._sends.get((dst, src))
        if pair is None:
            pair = self._resolve(dst, src)
        if tag.__class__ is not str or len(tag) > 64:
            raise ValueError("tag must be a string of at most 64 characters")
        if type(values) is not list:
            values = list(values)  # a queue share's deque, a tuple, a generator
        if not values:
            return 0
        self.counts["sent"] += len(values)
        return send_batch(self, pair, tag, values, reliable)

    def _send_pair(self, pair: _Pair, tag: str, data: Any, reliable: bool, ext: Mapping[str, Any] | None, packed: bytes | None = None) -> bool:
        """Every message made in this house starts here (a send, an answer, an error report)."""
        stamp = self.now()
        parcel, offset, payload = None, 0, data
        if ext or packed is not None:  # extensions travel in the parcel, even to a share of this house: one place to read them
            if ext and BATCH_KEY in ext:
                raise ValueError(f"header extension {BATCH_KEY!r} is the router's own: send many messages with send_many")
            parcel = encode(self._pack, pair.packed, tag, stamp, self._pack(data) if packed is None else packed, pack_ext(ext))
            offset, payload = 4 + _u32(parcel, 0)[0], _UNSET
        routed = self.hooks.routed
        if routed is None:
            return self._dispatch(pair, tag, stamp, parcel, offset, payload, reliable)
        routed(pair, tag, stamp, data)
        try:
            return self._dispatch(pair, tag, stamp, parcel, offset, payload, reliable)
        finally:
            settled = self.hooks.settled
            if settled is not None:
                settled(pair)

    def _resolve(self, dst: Route | str, src: str) -> _Pair:
        """The pair of a send, validated and made absolute; cached, since a flow
        sends along the same few routes over and over."""
        route = Route.parse(dst) if isinstance(dst, str) else Route.make(*dst)
        channel = route.channel or self.default_channel
        pair = self._pair(Route.make(src, self.yard, self.estate, channel), route.resolved(self.yard, self.estate, channel))
        self._sends[(dst, src)] = pair
        return pair

    def _parcel(self, pair: _Pair, tag: str, stamp: float, parcel: Any, data: Any) -> bytes:
        """The bytes to pass on: the parcel as it came, or a new one for a message made here."""
        if parcel is not None:
            return parcel if type(parcel) is bytes else bytes(parcel)
        return encode(self._pack, pair.packed, tag, stamp, self._pack(data))

    # -- arrivals ----------------------------------------------------------------

    def _open(self, parcel: Any) -> tuple[_Pair, str, float, int, int]:
        """The pair, tag, stamp, data offset and message count (more than 1: a batch) of a parcel
        from the wire; _Refused if malformed.

        parcel.open_header inlined: this runs for every message in every
        house it passes, and a cached pair makes the rest one dict lookup.
        """
        try:
            n = _u32(parcel, 0)[0]
            if n > MAX_HEADER:
                raise ParcelError("parcel header length out of range")
            count = 1
            if parcel[4] == 0x95:  # with header extensions: checked, and forwarded as they came
                (src, dst, tag, stamp), _ext, ext = split_ext_map(memoryview(parcel)[4 : 4 + n])
                if BATCH_KEY in ext:
                    count = batch_count(ext)
                    check_array(parcel, 4 + n, count)
            else:
                src, dst, tag, stamp = _unpackb(parcel[4 : 4 + n], use_list=False, raw=False, **HEADER_LIMITS)
            key = (src, dst)
            pair = self._pairs.get(key)
            if pair is None:
                pair = self._pair(Route.from_wire(src), Route.from_wire(dst), key)
        except Exception as error:  # noqa: BLE001 - whatever a hostile parcel does, it is malformed
            raise _Refused(f"malformed message ({type(error).__name__}: {str(error)[:80]})", "malformed") from None
        if tag.__class__ is not str or len(tag) > 64 or stamp.__class__ not in (float, int):
            raise _Refused("malformed message (tag or stamp)", "malformed")
        if not pair.dst.share:
            raise _Refused("no destination share", "malformed")
        return pair, tag, stamp, 4 + n, count

    def _from_lane(self, message: Any) -> None:
        parcel = message.data
        try:
            pair, tag, stamp, offset, count = self._open(parcel)
            src, dst = pair.src, pair.dst
            if src.estate == self.estate and src.yard != message.remote:
                raise _Refused(f"yard {message.remote!r} sent as {src.yard!r}", "spoofed")
            if src.estate != self.estate and message.remote != self.manor:
                raise _Refused(f"yard {message.remote!r} sent as estate {src.estate!r}", "spoofed")
            if dst.estate != self.estate and not self.is_manor:
                raise _Refused("only the manor sends to other estates", "misrouted")
            if dst.estate == self.estate and dst.yard not in ("", self.yard):
                raise _Refused(f"yard {self.yard!r} does not relay to yard {dst.yard!r}", "misrouted")
        except _Refused as refused:
            self._refuse_raw(parcel, refused)
            return
        self.counts["from_lane"] += 1
        try:
            self._dispatch(pair, tag, stamp, parcel, offset, _UNSET, message.reliable, count)
        except Exception:  # noqa: BLE001 - see _broke
            self._broke("lane", message.remote)

    def _from_road(self, channel: str, road: Any, message: Any) -> None:
        parcel = message.data
        try:
            pair, tag, stamp, offset, count = self._open(parcel)
            src, dst = pair.src, pair.dst
            remote = message.remote
            if src.estate != remote:
                raise _Refused(f"estate {remote!r} sent as {src.estate!r}", "spoofed")
            if dst.estate != self.estate:
                raise _Refused(f"estate {self.estate!r} does not relay to {dst.estate!r}", "misrouted")
            if src.channel != channel:  # replies go back the way it came
                pair = self._pair(src._replace(channel=channel), dst)
                parcel = readdress(self._pack, pair.packed, tag, stamp, parcel, offset)  # extensions and data untouched
                offset = len(parcel) - (len(message.data) - offset)
            handler = self._handlers.get(tag)
            access = "write" if handler is None else handler.access
            # An answer is one message: a batch would land many on one read's credit, so it needs a rule.
            if access == ACCESS_REPLY and count == 1 and self._replies.is_reply(remote, channel, dst, tag, len(parcel)):
                self.counts["replies"] += 1
            else:
                admit(self.policy, road, remote, dst.share, tag, access, channel)
        except _Refused as refused:
            self._refuse_raw(parcel, refused, channel)
            return
        self.counts["from_road"] += 1
        try:
            self._dispatch(pair, tag, stamp, parcel, offset, _UNSET, message.reliable, count)
        except Exception:  # noqa: BLE001 - see _broke
            self._broke("road", message.remote)

    # -- the one path every message takes --------------------------------------

    def _dispatch(
        self, pair: _Pair, tag: str, stamp: float, parcel: Any, offset: int, data: Any, reliable: bool, count: int = 1
    ) -> bool:
        """Land, or pass on, one parcel standing for ``count`` messages (more than one: a batch)."""
        dst = pair.dst
        try:
            if dst.estate == self.estate:
                if dst.yard == self.yard or (not dst.yard and self.is_manor):
                    if not dst.yard and self._forwards:
                        yard = self._forwards.get(dst.share)
                        if yard is not None:
                            self._pass_on(pair, tag, stamp, parcel, offset, data, yard, reliable)
                            self.counts["forwarded"] += count
                            pair.count += count
                            return True
                    if count > 1:
                        self.counts["delivered"] += land_batch(self, pair, tag, stamp, parcel, offset, count, reliable)
                        pair.count += count
                        return True
                    landing = self.hooks.landing
                    if landing is not None:
                        landing(pair, tag, stamp, parcel, offset, data)
                    land(self, pair, tag, stamp, parcel, offset, data, reliable)
                    landed = self.hooks.landed
                    if landed is not None:
                        landed(pair, tag)
                    self.counts["delivered"] += 1
                else:
                    self._lane_send(pair, tag, stamp, parcel, offset, data, dst.yard or self.manor, reliable)
            elif self.is_manor:
                road = self.roads.get(dst.channel)
                if road is None:
                    raise _Refused(f"no road on channel {dst.channel!r} at estate {self.estate!r}", "no_road")
                parcel = self._parcel(pair, tag, stamp, parcel, data)
                handler = self._handlers.get(tag)
                if handler is None or handler.access != ACCESS_REPLY:  # answers expect nothing back
                    self._replies.expect(pair, tag)
                    if tag == "read" and dst.channel in self._allowances:  # its value is owed: let in, whatever its size
                        self._allowances[dst.channel].sent(dst.estate, tag, self._clock())
                if self._held and (dst.channel, dst.estate) in self._held:
                    # Earlier messages still wait for this estate: they go first,
                    # or this one waits behind them (order per stream).
                    release(self, dst.channel, dst.estate)
                    if (dst.channel, dst.estate) in self._held:
                        hold(self, pair, tag, parcel, reliable, count)
                        return True
                try:
                    road.send_bytes(parcel, dst.estate, stream=pair.stream, reliable=reliable)
                except KeyError:
                    hold(self, pair, tag, parcel, reliable, count)
                    return True
                except ClosedError as error:  # the house is shutting down
                    raise _Refused(f"cannot send: {error}", "closed") from None
                except ValueError as error:  # too large for the road
                    raise _Refused(f"cannot send: {error}", "too_large") from None
                self.counts["to_road"] += 1
            else:
                self._lane_send(pair, tag, stamp, parcel, offset, data, self.manor, reliable)
        except _Refused as refused:
            if refused.count is None and refused.counter != "malformed":  # a malformed batch is one bad parcel
                refused.count = count
            self._refuse(pair, tag, refused)
            return False
        pair.count += count
        return True

    def _pass_on(self, pair: _Pair, tag: str, stamp: float, parcel: Any, offset: int, data: Any, yard: str, reliable: bool) -> None:
        """A message for a forwarded share (:meth:`forward`), down the lane with its destination's yard filled in."""
        on = self._pair(pair.src, pair.dst._replace(yard=yard))
        if parcel is not None:  # the header says where it goes: rewritten, extensions and data as they came
            parcel = readdress(self._pack, on.packed, tag, stamp, parcel, offset)
        self._lane_send(on, tag, stamp, parcel, 0, data, yard, reliable)

    def _lane_send(self, pair: _Pair, tag: str, stamp: float, parcel: Any, offset: int, data: Any, yard: str, reliable: bool) -> None:
        lane = self.lane
        if lane is None:
            raise _Refused(f"yard {self.yard!r} has no lane to reach {yard!r}", "no_lane")
        parcel = self._parcel(pair, tag, stamp, parcel, data)
        try:
            lane.send_bytes(parcel, yard, stream=pair.stream, reliable=reliable)
        except KeyError:
            raise _Refused(f"no yard {yard!r} in estate {self.estate!r}", "no_yard") from None
        except ClosedError as error:  # the house is shutting down
            raise _Refused(f"cannot send: {error}", "closed") from None
        except ValueError as error:  # too large for the lane
            raise _Refused(f"cannot send: {error}", "too_large") from None
        self.counts["to_lane"] += 1

    # -- refusals and errors ---------------------------------------------------

    def _refuse_raw(self, parcel: Any, refused: _Refused, channel: str = "") -> None:
        refuse_raw(self, parcel, refused, channel)

    def _refuse(self, pair: _Pair, tag: str, refused: _Refused) -> None:
        refuse(self, pair, tag, refused)

    def _done(self, outgoing: Any) -> None:
        """A stack finished a message: only a failure matters (it came from a parcel)."""
        if not outgoing.failed:
            return
        # A full backlog (the estate is down and enough waits for it) is its own kind:
        # the sender may slow down or drop, where "undelivered" may be worth a retry.
        # So is a full send queue (the estate is up but reads slower than this house sends).
        reason = outgoing.reason
        kind = "backlog_full" if reason == BACKLOG_FULL else "send_queue_full" if reason == SEND_QUEUE_FULL else "undelivered"
        try:
            self._refuse_raw(outgoing.data, _Refused(f"transport: {outgoing.reason or 'failed'}", kind))
        except Exception:  # noqa: BLE001 - see _broke
            self._broke("done", outgoing.remote)

    def _broke(self, where: str, who: Any) -> None:
        """Code the router called (a flow's watchers) raised: logged, counted ``failed``, and the
        next message served -- a hook removes a listener that raises, leaving the house deaf."""
        self.counts["failed"] += 1
        log.exception("%s: handling a message (%s, from %s) raised", self.yard or self.estate, where, who)


    @property
    def routes(self) -> dict[tuple[Route, Route], int]:
        """Messages per (src, dst) route pair this router has handled."""
        # Each pair once (it is cached under more than one key), in first-use order: not a set's address order.
        return {(pair.src, pair.dst): pair.count for pair in dict.fromkeys(self._pairs.values()) if pair.count}

    @property
    def holding(self) -> int:
        """Messages waiting for an estate that has not joined yet (flowcast.routing.hold)."""
        return self._held.count

    def status(self) -> dict[str, Any]:
        """A plain snapshot for ``flowcast status`` (flowcast.routing.snapshot)."""
        return snapshot(self)
