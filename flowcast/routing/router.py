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
  the same way.

Anything refused or undeliverable is counted, and -- unless it was itself an
error report -- answered with an ``error`` message routed back to its
source share, carrying the reason.  A router never raises for what arrives.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

from flowcast.routing.policy import Policy, PolicyError
from flowcast.routing.route import Route, RouteError
from flowcast.store.share import QueueShare

__all__ = ["Router", "envelope", "POLICY_SHARE", "presence_share"]

log = logging.getLogger("flowcast.routing")

#: A value share whose ``rules`` field, when written, replaces the policy.
POLICY_SHARE = "flowcast.policy"
#: How long an estate may answer a message it was sent (error or read reply), policy or not.
REPLY_WINDOW = 300.0
_EXPECT_LIMIT = 10_000
_REPLIES = ("error", "value")
#: Errors for share S land in the queue share ``S.error``, at most this many kept.
ERROR_QUEUE_BOUND = 1000
_ROUTE_CACHE = 4096
_ROUTE_STATS = 4096
_LOG_PER_SECOND = 10.0


def presence_share(channel: str) -> str:
    """The share whose fields are ``{estate: presence}`` for one road."""
    return f"flowcast.road.{channel}.presence"


def envelope(src: Route, dst: Route, tag: str, stamp: float, data: Any) -> dict[str, Any]:
    """A routed message as it travels: ``{route: {src, dst}, tag, stamp, data}``."""
    return {"route": {"src": list(src), "dst": list(dst)}, "tag": tag, "stamp": stamp, "data": data}


class _Refused(Exception):
    """Internal: a message the router will not deliver, and why."""

    def __init__(self, reason: str, counter: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.counter = counter


class Router:
    """Route messages for one house (yard ``yard`` of estate ``estate``).

    ``manor`` names the estate's manor yard; the manor is the house that
    runs roads.  ``policy`` decides road traffic (default: an empty policy,
    which denies every road message).  ``default_channel`` is the road a
    route with no channel takes.

    A message for an estate its road does not know yet is held (at most
    ``hold_limit`` messages, each at most ``hold_timeout`` seconds) and sent
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
        self._held: dict[tuple[str, str], deque[tuple[float, dict, Route, Route, str, bool]]] = {}
        self._held_count = 0
        self._hold_timer: Any = None
        self._expect: dict[tuple[str, str, str], float] = {}  # (estate, yard, share) -> replies accepted until
        self._clock = scheduler.clock.now if scheduler is not None else time.monotonic
        self.lane: Any = None
        self.roads: dict[str, Any] = {}
        self.keeps: dict[Any, Any] = {}  # keep directory -> Keep, shared by the roads
        self.counts: Counter[str] = Counter()
        self.routes: Counter[tuple[Route, Route]] = Counter()  # (src, dst) -> messages
        self.denials: deque[dict[str, Any]] = deque(maxlen=100)
        self._route_cache: dict[tuple, Route] = {}
        self._resolved: dict[tuple[Any, str], tuple[Route, Route]] = {}
        self._pending: dict[Any, tuple[Route, Route, str]] = {}  # Outgoing -> (src, dst, tag)
        self._log_tokens = _LOG_PER_SECOND
        self._log_at = time.monotonic()
        policy_share = store.share(POLICY_SHARE)
        policy_share.watchers.append(self._policy_written)

    # -- wiring ----------------------------------------------------------------

    def attach_lane(self, lane: Any) -> None:
        """Use ``lane`` (a LaneStack) for the other yards of this estate."""
        self.lane = lane
        lane.on_message = self._from_lane
        lane.on_done = self._done

    def attach_road(self, channel: str, road: Any) -> None:
        """Use ``road`` (a RoadStack) for channel ``channel``; only the manor runs roads."""
        if not self.is_manor:
            raise ValueError(f"yard {self.yard!r} is not the manor ({self.manor!r}): only the manor runs roads")
        Route.make(channel=channel)
        self.roads[channel] = road
        road.on_message = lambda message, channel=channel: self._from_road(channel, road, message)
        road.on_done = self._done
        presence = self.store.share(presence_share(channel))
        previous = road.on_presence

        def on_presence(name: str, old: Any, new: Any) -> None:
            presence.update({name: getattr(new, "value", str(new))})
            if (channel, name) in self._held:
                self._release(channel, name)
            if previous is not None:
                previous(name, old, new)

        road.on_presence = on_presence

    # -- sending -----------------------------------------------------------------

    def send(
        self,
        dst: Route | str,
        data: Any,
        *,
        src: str = "",
        tag: str = "",
        reliable: bool = True,
    ) -> bool:
        """Route ``data`` from share ``src`` of this house to ``dst``.

        Returns False when the router refused it at once (the reason is
        counted and, when ``src`` names a share, delivered there as an
        ``error``); True means it is on its way.  Bad arguments raise:
        they are the caller's mistake, not the network's.
        """
        pair = self._resolved.get((dst, src))
        if pair is None:
            pair = self._resolve(dst, src)
        if tag.__class__ is not str or len(tag) > 64:
            raise ValueError("tag must be a string of at most 64 characters")
        source, target = pair
        message = {"route": {"src": list(source), "dst": list(target)}, "tag": tag, "stamp": self.now(), "data": data}
        self.counts["sent"] += 1
        return self._dispatch(message, source, target, tag, reliable)

    def _resolve(self, dst: Route | str, src: str) -> tuple[Route, Route]:
        """``(source, destination)`` of a send, validated and made absolute; cached.

        A flow sends along the same few routes over and over: parsing and
        checking them once keeps a send at a dict lookup.
        """
        route = Route.parse(dst) if isinstance(dst, str) else Route.make(*dst)
        channel = route.channel or self.default_channel
        pair = (Route.make(src, self.yard, self.estate, channel), route.resolved(self.yard, self.estate, channel))
        if len(self._resolved) >= _ROUTE_CACHE:
            self._resolved.clear()
        self._resolved[(dst, src)] = pair
        return pair

    # -- arrivals ----------------------------------------------------------------

    def _from_lane(self, message: Any) -> None:
        try:
            src, dst, tag = self._open(message.data)
            if src.estate == self.estate and src.yard != message.remote:
                raise _Refused(f"yard {message.remote!r} sent as {src.yard!r}", "spoofed")
            if dst.estate != self.estate and not self.is_manor:
                raise _Refused("only the manor sends to other estates", "misrouted")
            if dst.estate == self.estate and dst.yard not in ("", self.yard):
                raise _Refused(f"yard {self.yard!r} does not relay to yard {dst.yard!r}", "misrouted")
        except _Refused as refused:
            self._refuse_raw(message.data, refused)
            return
        self.counts["from_lane"] += 1
        self._dispatch(message.data, src, dst, tag, True)

    def _from_road(self, channel: str, road: Any, message: Any) -> None:
        data = message.data
        try:
            src, dst, tag = self._open(data)
            remote = message.remote
            if src.estate != remote:
                raise _Refused(f"estate {remote!r} sent as {src.estate!r}", "spoofed")
            if dst.estate != self.estate:
                raise _Refused(f"estate {self.estate!r} does not relay to {dst.estate!r}", "misrouted")
            if src.channel != channel:
                src = src._replace(channel=channel)
                data["route"]["src"] = list(src)
            try:
                role = road.remote(remote).record.role
            except KeyError:
                role = ""
            access = "read" if tag == "read" else "write"
            if tag in _REPLIES and self._awaits(remote, dst):
                self.counts["replies"] += 1
            elif not self.policy.decide(access, remote, role, dst.share, tag, channel).allowed:
                raise _Refused(f"{access} of {dst.share!r} by {remote!r} ({role}) on {channel!r} denied by policy", "denied")
        except _Refused as refused:
            self._refuse_raw(data, refused)
            return
        self.counts["from_road"] += 1
        self._dispatch(data, src, dst, tag, True)

    def _open(self, data: Any) -> tuple[Route, Route, str]:
        """``(src, dst, tag)`` of a message from the wire; _Refused if malformed."""
        try:
            route = data["route"]
            src = self._wire_route(route["src"])
            dst = self._wire_route(route["dst"])
            tag = data["tag"]
            data["stamp"], data["data"]
        except (TypeError, KeyError, RouteError) as error:
            raise _Refused(f"malformed message ({error})", "malformed") from None
        if type(tag) is not str or len(tag) > 64:
            raise _Refused("malformed message (tag)", "malformed")
        if not dst.share:
            raise _Refused("no destination share", "malformed")
        return src, dst, tag

    def _wire_route(self, value: Any) -> Route:
        key = tuple(value) if type(value) is list else None
        if key is not None:
            found = self._route_cache.get(key)
            if found is not None:
                return found
        route = Route.from_wire(value)
        if key is not None:
            if len(self._route_cache) >= _ROUTE_CACHE:
                self._route_cache.clear()
            self._route_cache[key] = route
        return route

    # -- the one path every message takes --------------------------------------

    def _dispatch(self, message: dict, src: Route, dst: Route, tag: str, reliable: bool) -> bool:
        try:
            if dst.estate == self.estate:
                if dst.yard == self.yard or (not dst.yard and self.is_manor):
                    self._land(message, src, dst, tag)
                    self.counts["delivered"] += 1
                else:
                    self._lane_send(message, src, dst, tag, dst.yard or self.manor, reliable)
            elif self.is_manor:
                road = self.roads.get(dst.channel)
                if road is None:
                    raise _Refused(f"no road on channel {dst.channel!r} at estate {self.estate!r}", "no_road")
                try:
                    outgoing = road.send(message, dst.estate, flow=hash((src.share, dst.share)) & 0xFFFF, reliable=reliable)
                except KeyError:
                    self._hold(message, src, dst, tag, reliable)
                    return True
                if reliable:
                    self._pending[outgoing] = (src, dst, tag)
                self._expect_reply(dst.estate, src)
                self.counts["to_road"] += 1
            else:
                self._lane_send(message, src, dst, tag, self.manor, reliable)
        except _Refused as refused:
            self._refuse(src, dst, tag, refused)
            return False
        routes = self.routes
        key = (src, dst)
        if key in routes or len(routes) < _ROUTE_STATS:
            routes[key] += 1
        else:
            self.counts["routes_untracked"] += 1
        return True

    # -- replies ---------------------------------------------------------------

    def _expect_reply(self, estate: str, src: Route) -> None:
        """``estate`` may answer (``error``/``value``) to ``src`` for a while, policy or not.

        Without this a sender whose policy does not let the remote write
        never learns that its own message was denied or failed there.
        """
        expect = self._expect
        key = (estate, src.yard, src.share)
        if key not in expect and len(expect) >= _EXPECT_LIMIT:
            del expect[next(iter(expect))]  # the oldest route: bounded memory
        expect[key] = self._clock() + REPLY_WINDOW

    def _awaits(self, remote: str, dst: Route) -> bool:
        until = self._expect.get((remote, dst.yard or self.manor, dst.share))
        return until is not None and until >= self._clock()

    # -- holding messages for estates that have not joined yet ---------------

    def _hold(self, message: dict, src: Route, dst: Route, tag: str, reliable: bool) -> None:
        if self.hold_timeout <= 0 or self._held_count >= self.hold_limit:
            why = "" if self.hold_timeout <= 0 else f" (and {self._held_count} messages already wait for estates to join)"
            raise _Refused(f"estate {dst.estate!r} is not known on channel {dst.channel!r}{why}", "no_remote")
        deadline = self.scheduler.clock.now() + self.hold_timeout
        self._held.setdefault((dst.channel, dst.estate), deque()).append((deadline, message, src, dst, tag, reliable))
        self._held_count += 1
        self.counts["held"] += 1
        if self._hold_timer is None:
            self._hold_timer = self.scheduler.call_at(deadline, self._expire_held)

    def _release(self, channel: str, estate: str) -> None:
        """The estate joined: send what waited for it, in order."""
        road = self.roads.get(channel)
        held = self._held.pop((channel, estate), None)
        if road is None or not held:
            return
        while held:
            _deadline, message, src, dst, tag, reliable = held[0]
            try:
                outgoing = road.send(message, estate, flow=hash((src.share, dst.share)) & 0xFFFF, reliable=reliable)
            except KeyError:  # not known yet after all (a presence change of another kind)
                self._held[(channel, estate)] = held
                return
            held.popleft()
            self._held_count -= 1
            if reliable:
                self._pending[outgoing] = (src, dst, tag)
            self._expect_reply(estate, src)
            self.counts["to_road"] += 1
            self.counts["released"] += 1

    def _expire_held(self) -> None:
        self._hold_timer = None
        now = self.scheduler.clock.now()
        first = None
        for key in list(self._held):
            held = self._held[key]
            while held and held[0][0] <= now:
                _deadline, _message, src, dst, tag, _reliable = held.popleft()
                self._held_count -= 1
                self._refuse(src, dst, tag, _Refused(
                    f"estate {dst.estate!r} did not join channel {dst.channel!r} within {self.hold_timeout:g} s", "no_remote"
                ))
            if held:
                first = held[0][0] if first is None else min(first, held[0][0])
            else:
                del self._held[key]
        if first is not None:
            self._hold_timer = self.scheduler.call_at(first, self._expire_held)

    def _lane_send(self, message: dict, src: Route, dst: Route, tag: str, yard: str, reliable: bool) -> None:
        lane = self.lane
        if lane is None:
            raise _Refused(f"yard {self.yard!r} has no lane to reach {yard!r}", "no_lane")
        try:
            outgoing = lane.send(message, yard, flow=hash((src.share, dst.share)) & 0xFFFF, reliable=reliable)
        except KeyError:
            raise _Refused(f"no yard {yard!r} in estate {self.estate!r}", "no_yard") from None
        if reliable:
            self._pending[outgoing] = (src, dst, tag)
        self.counts["to_lane"] += 1

    def _land(self, message: dict, src: Route, dst: Route, tag: str) -> None:
        try:
            share = self.store.get(dst.share)
        except ValueError:
            share = None
        if share is None:
            raise _Refused(f"no share {dst.share!r} in yard {self.yard!r} of {self.estate!r}", "no_share")
        if tag == "error":
            # Errors go beside the share, never into it: a value share that
            # changed would be sent again, and fail again, for ever.
            try:
                errors = self.store.queue(dst.share + ".error", ERROR_QUEUE_BOUND)
            except (TypeError, ValueError):
                raise _Refused(f"share {dst.share + '.error'!r} exists and is not a queue", "no_share") from None
            if not errors.push(message):
                self.counts["errors_overflowed"] += 1
            return
        if tag == "read":
            if isinstance(share, QueueShare):
                raise _Refused(f"share {dst.share!r} is a queue and cannot be read", "unreadable")
            reply = envelope(dst, src, "value", self.now(), share.fields())
            self.counts["reads"] += 1
            self._dispatch(reply, dst, src, "value", True)
            return
        if isinstance(share, QueueShare):
            if not share.push(message):
                raise _Refused(f"queue {dst.share!r} is full", "queue_full")
            return
        data = message["data"]
        try:
            if isinstance(data, Mapping):
                share.update(data)
            else:
                share.update(value=data)
        except Exception as error:  # noqa: BLE001 - a share's watcher is user code
            raise _Refused(f"share {dst.share!r} refused the update: {error}", "update_failed") from None

    # -- refusals and errors ---------------------------------------------------

    def _refuse_raw(self, data: Any, refused: _Refused) -> None:
        """A refusal of a message as it arrived: reply only if its source is readable."""
        try:
            src = Route.from_wire(data["route"]["src"])
            dst = Route.from_wire(data["route"]["dst"])
            tag = data["tag"] if type(data["tag"]) is str else ""
        except Exception:  # noqa: BLE001 - malformed beyond an answer
            self.counts[refused.counter] += 1
            self._note(refused, None, None, "")
            return
        self._refuse(src, dst, tag, refused)

    def _refuse(self, src: Route, dst: Route, tag: str, refused: _Refused) -> None:
        self.counts[refused.counter] += 1
        self._note(refused, src, dst, tag)
        if tag == "error" or not src.share:
            self.counts["errors_dropped"] += 1
            return
        here = Route(dst.share, self.yard, self.estate, src.channel)
        report = envelope(
            here, src, "error", self.now(), {"reason": refused.reason, "tag": tag, "dst": str(dst), "kind": refused.counter}
        )
        self.counts["errors_sent"] += 1
        self._dispatch(report, here, src, "error", True)

    def _note(self, refused: _Refused, src: Route | None, dst: Route | None, tag: str) -> None:
        entry = {
            "at": time.time(),
            "kind": refused.counter,
            "reason": refused.reason,
            "src": "" if src is None else str(src),
            "dst": "" if dst is None else str(dst),
            "tag": tag,
        }
        self.denials.append(entry)
        now = time.monotonic()
        self._log_tokens = min(_LOG_PER_SECOND, self._log_tokens + (now - self._log_at) * _LOG_PER_SECOND)
        self._log_at = now
        if self._log_tokens >= 1:
            self._log_tokens -= 1
            log.warning("%s: %s (src %s, dst %s, tag %r)", refused.counter, refused.reason, entry["src"], entry["dst"], tag)
        else:
            self.counts["notes_unlogged"] += 1

    def _done(self, outgoing: Any) -> None:
        entry = self._pending.pop(outgoing, None)
        if entry is None or outgoing.state != "failed":
            return
        src, dst, tag = entry
        self._refuse(src, dst, tag, _Refused(f"transport: {outgoing.reason or 'failed'}", "undelivered"))

    # -- control -------------------------------------------------------------------

    def _policy_written(self, share: Any) -> None:
        rules = share.get("rules")
        if rules is None:
            return
        try:
            self.policy.replace(rules)
        except PolicyError as error:
            self.counts["policy_rejected"] += 1
            log.warning("policy update refused: %s", error)
            self.store.share(POLICY_SHARE + ".error").update(value=str(error))
            return
        self.counts["policy_replaced"] += 1
        log.info("policy replaced: %d rules", len(self.policy))

    def status(self) -> dict[str, Any]:
        """A plain snapshot for ``flowcast status``."""
        roads = {}
        for channel, road in self.roads.items():
            roads[channel] = {
                name: getattr(remote.presence, "value", str(remote.presence))
                for name, remote in getattr(road, "_by_name", {}).items()
            }
        return {
            "estate": self.estate,
            "yard": self.yard,
            "manor": self.manor,
            "yards": list(self.lane.yards) if self.lane is not None else [],
            "held": {f"{estate}/{channel}": len(q) for (channel, estate), q in self._held.items()},
            "roads": roads,
            "counts": dict(self.counts),
            "policy": dict(self.policy.counts),
            "routes": [[str(src), str(dst), n] for (src, dst), n in self.routes.most_common(50)],
            "denials": list(self.denials)[-20:],
        }
