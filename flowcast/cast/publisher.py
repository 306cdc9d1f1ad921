"""The publishing estate's half of CAST: subscriptions, leases, and forwarding from the cache.

Lives in the house that runs the cache.  The cache is the only state that
matters: a subscription here is a lease and a read position, so losing it
(a lease that lapsed, a restart) costs a re-subscribe from the
subscriber's cursor, never a message.  That is why batches carry no
acknowledgements: the subscriber reports its cursor now and then, which
also opens the window, and asks again from its cursor when it sees a hole.

Only durable messages are forwarded: ``high`` moves when a publish ticket
completes, so a subscriber never holds a message the cache could lose.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Sequence
from typing import Any

from flowcast.cast.config import CastConfig
from flowcast.cast.wire import (
    BATCH, CURSOR, GAP, PUB, PUBACK, SUB, SUBOK, UNSUB,
    check_name, check_recipients, estate_of, read_cursor, read_pub, read_sub, read_unsub,
)
from flowcast.routing import Landing, Refused, Route, declare_access
from flowcast.transport.hooks import Hooks

__all__ = ["Publisher", "SUBSCRIBE", "SHARE", "HOOKS"]

log = logging.getLogger("flowcast.cast.publisher")

#: The policy permission a road's cast.sub, cast.unsub and cast.cursor need.
SUBSCRIBE = declare_access("subscribe")
#: The share CAST messages are addressed to at the publishing house.
SHARE = "cast"
#: A renew asking for the cursor of a rewind this recent renews the lease only (see _on_sub).
_REWIND_AGAIN = 1.0
_READ_LIMIT = 1000
_READS = 32
_READ_BYTES = 256 << 10
#: What the export hears (flowcast.export.castevents): stored(ticket), forwarded(held, after, upto, count, size),
#: resync(held, cursor, high), gap(held, start, upto), lease_expired(held), damaged(seq): a stored message whose
#: checksum failed (said once per seq; each subscription passing it gets a gap over it, heard as gap too).
HOOKS = ("stored", "forwarded", "resync", "gap", "lease_expired", "damaged")


class Held:
    """One remote subscription as the publisher holds it."""

    __slots__ = ("estate", "sid", "pattern", "split", "route", "expires", "sent", "scanned", "heard", "inflight", "n_inflight",
                 "b_inflight", "pumping", "rewound")

    def __init__(self, estate: str, sid: bytes, pattern: str, split: Any, route: Route, expires: float, cursor: int) -> None:
        self.estate, self.sid, self.pattern, self.split, self.route = estate, sid, pattern, split, route
        self.expires = expires
        self.pumping: Any = None  # the next slice of a long read, when one is due
        self.rewound: tuple[int, float, int | None] = (cursor, float("-inf"), None)  # the last rewind: (cursor, when, ask)
        self.rewind(cursor)

    def rewind(self, cursor: int) -> None:
        """Send again from ``cursor``: a resync, or a renew (which is the same message)."""
        self.sent = self.scanned = self.heard = cursor  # last upto sent; read position; last cursor heard
        self.inflight: deque[tuple[int, int, int]] = deque()  # (upto, messages, bytes) past ``heard``
        self.n_inflight = self.b_inflight = 0


class Publisher:
    """Answers cast.sub/unsub/cursor/pub on ``router`` and forwards ``cache`` to subscribers."""

    def __init__(self, router: Any, cache: Any, config: CastConfig | None = None) -> None:
        self.router = router
        self.cache = cache
        self.config = config if config is not None else CastConfig()
        self.estate = router.estate
        self.scheduler = router.scheduler
        self.clock = self.scheduler.clock.now
        self.counts: Counter[str] = Counter()
        self.hooks = Hooks(HOOKS, "cast publisher", direct=False)
        self.subs: dict[tuple[str, bytes], Held] = {}
        self.per_remote: Counter[str] = Counter()
        self.high = int(cache.high_seq)
        self._done: list[tuple[Any, Any, bytes | None]] = []  # (ticket, pair to answer or None, id), completed
        self._settling: Any = None
        self._sweep: Any = None
        self._closed = False
        on_damaged = getattr(cache, "on_damaged", None)
        if on_damaged is not None:  # a stand-in cache of a test may not check
            on_damaged(self._on_damaged)
        router.store.share(SHARE)
        router.handle(SUB, self._on_sub, access=SUBSCRIBE)
        router.handle(UNSUB, self._on_unsub, access=SUBSCRIBE)
        router.handle(CURSOR, self._on_cursor, access=SUBSCRIBE)
        router.handle(PUB, self._on_pub)  # lane only: a road's is refused in the handler

    # -- publishing -----------------------------------------------------------------

    def publish(self, name: str, data: Any, *, id: bytes | None = None, publisher: str = "", recipients: Sequence[str] | None = None) -> Any:
        """Store ``data`` under ``name``; the cache's ticket, done once durable.

        Refused (raised) for a bad name, another estate's prefix, bad
        recipients or a message over the size limit, before the cache sees it.
        """
        return self._store(read_pub(_pub_map(name, data, id, publisher, recipients), self.estate), None)

    def _on_pub(self, landing: Landing) -> None:
        if landing.src.estate != self.estate:
            landing.refuse(f"cast.pub from estate {landing.src.estate!r}: only houses of {self.estate!r} publish here", "foreign_publish")
        try:
            self._store(read_pub(landing.data, self.estate), landing.pair)
        except Refused as refused:  # answered with the id, so the publishing house knows which publish
            self.counts[refused.kind] += 1
            data = landing.data
            id = data.get("id") if isinstance(data, dict) else None
            landing.reply({"reason": refused.reason, "tag": PUB, "dst": str(landing.dst), "kind": refused.kind, "id": id}, tag="error")

    def _store(self, pub: Any, pair: Any) -> Any:
        try:
            ticket = self.cache.publish(pub.name, pub.data, id=pub.id, publisher=pub.publisher, recipients=list(pub.recipients) if pub.recipients else None)
        except Exception as error:  # the cache's own checks (CastNameError, CacheError) carry the word in ``reason``
            reason = getattr(error, "reason", None)
            if not isinstance(reason, str):
                raise
            raise Refused(str(error), reason) from None
        self.counts["published"] += 1
        ticket.add_done(lambda done, pair=pair, id=pub.id: self._completed(done, pair, id))
        return ticket

    def _completed(self, ticket: Any, pair: Any, id: bytes | None) -> None:
        """Called by the cache on the house thread; many tickets complete at once, so forward once for all."""
        self._done.append((ticket, pair, id))
        if self._settling is None and not self._closed:
            self._settling = self.scheduler.call_later(0.0, self._settle)

    def _settle(self) -> None:
        """Tickets that became durable: answer their publishers, then forward."""
        self._settling = None
        done, self._done = self._done, []
        moved = False
        for ticket, pair, id in done:
            if ticket.error is not None:
                self.counts["publish_refused"] += 1
                if pair is not None:
                    kind = getattr(ticket.error, "reason", None) or "io_error"
                    report = {"reason": str(ticket.error)[:300], "tag": PUB, "dst": str(pair.dst), "kind": kind, "id": id}
                    self.router.answer(pair, report, tag="error")
                continue
            if ticket.seq > self.high:
                self.high = ticket.seq
                moved = True
            if self.hooks.stored is not None:
                self.hooks.stored(ticket)
            if pair is not None:
                self.router.answer(pair, {"id": getattr(ticket, "id", None) or id, "seq": ticket.seq, "duplicate": bool(ticket.duplicate)}, tag=PUBACK)
        if moved:
            for held in list(self.subs.values()):
                self._pump(held)

    # -- subscriptions ----------------------------------------------------------------

    def _on_sub(self, landing: Landing) -> None:
        sub = read_sub(landing.data)
        estate = landing.src.estate
        if estate_of(sub.pattern) != self.estate:
            landing.refuse(f"pattern {sub.pattern[:60]!r} is not under {self.estate!r}/", "foreign_prefix")
        if not self.config.may_subscribe(estate, sub.pattern):
            self.counts["sub_denied"] += 1
            landing.refuse(f"estate {estate!r} may not subscribe to {sub.pattern[:60]!r}", "sub_denied")
        if sub.cursor > self.high:
            # A subscriber holding more than this cache ever gave: the cache may have lost committed
            # messages its high-water mark could not see (the last second before a crash), or a restored copy.
            self.counts["cursor_past_end"] += 1
            log.error("CAST cache %s: estate %r subscribes from cursor %d, past this cache's end (seq %d): the cache may"
                      " have lost committed messages", getattr(self.cache, "path", "?"), estate, sub.cursor, self.high)
            landing.refuse(f"cursor {sub.cursor} is from the future (the cache's high seq is {self.high})", "cursor_future")
        key = (estate, sub.sid)
        held = self.subs.get(key)
        if held is None and self.per_remote[estate] >= self.config.max_subs:
            landing.refuse(f"estate {estate!r} holds {self.config.max_subs} subscriptions, the most allowed", "too_many_subs")
        lease = min(sub.lease, self.config.lease)
        now = self.clock()
        rewound = True
        if held is None:
            held = self.subs[key] = Held(estate, sub.sid, sub.pattern, sub.split, landing.src, now + lease, sub.cursor)
            self.per_remote[estate] += 1
            self.counts["subscribed"] += 1
        else:
            held.pattern, held.split, held.route, held.expires = sub.pattern, sub.split, landing.src, now + lease
            cursor, when, ask = held.rewound
            if cursor == sub.cursor and ask == sub.ask and sub.ask is not None and now - when < _REWIND_AGAIN:
                # A renew repeating the last rewind's cursor and ask at once: renews queued
                # behind a partition arrive together, and each rewinding would send the
                # same range again.  An explicit ask (a new ``ask``) always rewinds.
                self.counts["rewind_repeated"] += 1
                rewound = False
            else:
                held.rewind(sub.cursor)
            self.counts["renewed"] += 1
        if rewound:
            held.rewound = (sub.cursor, now, sub.ask)
        if rewound and self.hooks.resync is not None and sub.cursor < self.high:
            self.hooks.resync(held, sub.cursor, self.high)
        landing.reply({"sid": sub.sid, "lease": lease, "low": int(self.cache.low_seq), "high": self.high}, tag=SUBOK)
        self._arm_sweep(held.expires)
        self._pump(held)

    def _on_unsub(self, landing: Landing) -> None:
        sid = read_unsub(landing.data)
        if self._drop((landing.src.estate, sid)):
            self.counts["unsubscribed"] += 1

    def _on_cursor(self, landing: Landing) -> None:
        sid, cursor = read_cursor(landing.data)
        held = self.subs.get((landing.src.estate, sid))
        if held is None:
            landing.refuse("no such subscription (its lease may have expired): subscribe again from your cursor", "no_subscription")
        if cursor > held.sent:
            landing.refuse(f"cursor {cursor} is from the future (sent up to {held.sent})", "cursor_future")
        if cursor > held.heard:
            held.heard = cursor
            inflight = held.inflight
            while inflight and inflight[0][0] <= cursor:
                _upto, n, size = inflight.popleft()
                held.n_inflight -= n
                held.b_inflight -= size
        self._pump(held)

    def _drop(self, key: tuple[str, bytes]) -> bool:
        held = self.subs.pop(key, None)
        if held is None:
            return False
        self.per_remote[key[0]] -= 1
        if not self.per_remote[key[0]]:
            del self.per_remote[key[0]]
        return True

    # -- forwarding -------------------------------------------------------------------

    def _pump(self, held: Held) -> None:
        """Send what the window allows, in seq order, from the read position on.

        At most ``_READS`` reads a call: a rare pattern behind many other
        names is read in slices, the rest on the next turn, so the house
        keeps answering in between.
        """
        held.pumping = None
        if held.expires <= self.clock() or self._closed or self.subs.get((held.estate, held.sid)) is not held:
            return
        config = self.config
        if held.sent < self.high and held.sent + 1 < self.cache.low_seq:
            self._gap(held)
        reads = 0
        while held.scanned < self.high and held.n_inflight < config.window and held.b_inflight < config.window_bytes:
            if reads >= _READS:
                held.pumping = self.scheduler.call_later(0.0, self._pump, held)
                return
            reads += 1
            limit = min(_READ_LIMIT, config.window - held.n_inflight)
            read = self.cache.read(held.scanned, pattern=held.pattern, split=held.split, limit=limit,
                                   max_bytes=min(_READ_BYTES, config.window_bytes - held.b_inflight), to=held.estate)
            # Read.upto: every match up to it was returned (a scan may pass rows that did not match).
            upto = min(read.upto, self.high)
            if read.damaged and read.damaged[0] <= upto and upto > held.scanned:  # said in stream order
                if not self._gap(held, upto, "damaged"):
                    return
                continue
            rows = [row for row in read if row.seq <= upto]
            if upto <= held.scanned:
                self.counts["stalled_reads"] += 1  # nothing readable past it: expired since the gap check
                return
            msgs, size = [], 0
            for row in rows:  # the read's ``to`` left out what is addressed to others: not even its existence leaves
                msgs.append([row.seq, row.id, row.name, row.publisher, row.stamp, row.data])
                size += len(row.data) + len(row.name)
            if not msgs:
                held.scanned = upto
                continue
            data = {"sid": held.sid, "after": held.sent, "upto": upto, "msgs": msgs}
            if not self.router.send(held.route, data, src=SHARE, tag=BATCH):
                self.counts["batch_refused"] += 1  # counted and noted by the router; the renew resends
                return
            held.sent = held.scanned = upto
            held.inflight.append((upto, len(msgs), size))
            held.n_inflight += len(msgs)
            held.b_inflight += size
            self.counts["forwarded"] += len(msgs)
            self.counts["batches"] += 1
            if self.hooks.forwarded is not None:
                self.hooks.forwarded(held, data["after"], upto, len(msgs), size)

    def _gap(self, held: Held, upto: int | None = None, why: str = "expired") -> bool:
        """What will never be sent is said (cast.gap), never skipped silently: expired, or damaged in the cache.

        A damaged message (its checksum failed, cachedamage.py) is in the
        gap of every subscription whose read passes it, whatever its
        pattern: the damage may be in the name it would have matched by.
        """
        if upto is None:
            upto = min(int(self.cache.low_seq) - 1, self.high)
        if not self.router.send(held.route, {"sid": held.sid, "from": held.sent + 1, "upto": upto}, src=SHARE, tag=GAP):
            return False  # the renew asks again, and gets the gap again
        self.counts["gaps"] += 1
        if why != "expired":
            self.counts[f"gaps_{why}"] += 1
        if self.hooks.gap is not None:
            self.hooks.gap(held, held.sent + 1, upto)
        held.sent = upto
        held.scanned = max(held.scanned, upto)
        return True

    def _on_damaged(self, seq: int) -> None:
        """The cache met a damaged message (logged there): counted in the status, and heard by the hook."""
        self.counts["damaged"] += 1
        if self.hooks.damaged is not None:
            self.hooks.damaged(seq)

    # -- time ---------------------------------------------------------------------------

    def _arm_sweep(self, when: float) -> None:
        if self._sweep is None or self._sweep.when > when:
            if self._sweep is not None:
                self._sweep.cancel()
            self._sweep = self.scheduler.call_at(when, self._expire_leases)

    def _expire_leases(self) -> None:
        self._sweep = None
        now = self.clock()
        nearest = None
        for key, held in list(self.subs.items()):
            if held.expires <= now:
                self._drop(key)
                self.counts["lease_expired"] += 1
                if self.hooks.lease_expired is not None:
                    self.hooks.lease_expired(held)
            elif nearest is None or held.expires < nearest:
                nearest = held.expires
        if nearest is not None and not self._closed:
            self._arm_sweep(nearest)

    def status(self) -> list[dict[str, Any]]:
        """Subscriptions, leases and cursors, for ``flowcast cast ls``."""
        now = self.clock()
        return [
            {"estate": h.estate, "sid": h.sid.hex(), "pattern": h.pattern, "split": h.split, "lease_left": h.expires - now,
             "cursor": h.heard, "sent": h.sent, "lag": self.high - h.heard}
            for h in self.subs.values()
        ]

    def close(self) -> None:
        self._closed = True
        for tag, handler in ((SUB, self._on_sub), (UNSUB, self._on_unsub), (CURSOR, self._on_cursor), (PUB, self._on_pub)):
            self.router.unhandle(tag, handler)
        for timer in (self._settling, self._sweep):
            if timer is not None:
                timer.cancel()


def _pub_map(name: str, data: Any, id: bytes | None, publisher: str, recipients: Sequence[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": check_name(name), "data": data, "publisher": publisher}
    if id is not None:
        out["id"] = id
    if recipients is not None:
        out["recipients"] = list(check_recipients(recipients) or ())  # a str is refused, not read as letters
    return out
