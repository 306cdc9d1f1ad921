"""The receiving estate's half of CAST: hold leases, take batches, deliver each message once.

The publisher keeps the messages, so this side keeps only a position: a
cursor per subscription and the ids it delivered (flowcast.cast.inbox).
Everything the network does wrong comes back to that position: a batch
that starts past the cursor means one was lost, and the answer is to
subscribe again from the cursor; a batch that starts before it is a
resend, and what it holds below the cursor or already seen is dropped.
A queue share that is full is back-pressure, never a loss: the cursor
stops at the last message that fit, and the subscription asks again from
there once there is room.

The inbox keeps what it hands to the flow until the flow acknowledges it
(flowcast.store.handoff): by default when the turn that took a message
ends, with ``ack="explicit"`` when the consumer calls ``ack``.  A house
killed at any instant hands over again, on its next subscribe, exactly
what its flow had not acknowledged, each flagged ``redelivered``.
"""

from __future__ import annotations

import logging
import os
from collections import Counter, deque
from typing import Any

from flowcast.cast.inbox import Inbox, Owed
from flowcast.cast.settle import Settler
from flowcast.cast.table import Table
from flowcast.cast.wire import BATCH, Batch, CURSOR, GAP, SUB, SUBOK, UNSUB, check_pattern, estate_of, read_batch, read_gap, read_subok
from flowcast.routing import Landing, Route, envelope
from flowcast.store.handoff import Handoff
from flowcast.store.sizes import estimate
from flowcast.transport.hooks import Hooks

__all__ = ["ACKS", "Subscriber", "Subscription", "TRANSIENT", "HOOKS"]

#: Error kinds a subscription outlives: the network's, not the publisher's word.
TRANSIENT = frozenset({"undelivered", "backlog_full", "no_remote", "closed", "no_road", "too_large"})
_MARGIN = 600.0  # ids outlive retention by this, as the cache's dedupe does
#: How a subscription's messages are acknowledged: when the turn that took them ends, or by ``ack``;
#: ``none``: at most once across a crash of this house (the inbox keeps no copy: what sat in the queue is gone).
ACKS = ("turn", "explicit", "none")
#: Messages an explicitly acknowledged subscription may have taken and not acknowledged; past it, delivery waits.
MAX_OWED = 10_000
log = logging.getLogger("flowcast.cast")
#: What the export hears (flowcast.export.castevents): delivered(sub, item), duplicate(sub, msg),
#: gap(sub, start, upto), resync(sub).
HOOKS = ("delivered", "duplicate", "gap", "resync")


class Subscription:
    """One subscription of this house: where it stands, and ``close()`` to end it."""

    def __init__(self, owner: "Subscriber", sid: bytes, estate: str, pattern: str, split: Any, into: str, lease: float, cursor: int, at: Route,
                 handoff: Handoff) -> None:
        self.owner = owner
        self.sid = sid
        self.estate = estate
        self.pattern = pattern
        self.split = split
        self.into = into
        self.lease = lease
        self.cursor = cursor
        self.at = at  # the publisher's cast share
        self.share = f"cast.s{sid.hex()}"
        #: pending (sent, no answer yet), active, refused (``error`` says why) or closed.
        self.state = "pending"
        self.error: str | None = None
        self.delivered = 0
        self.duplicates = 0
        self.gaps: list[tuple[int, int]] = []
        self.blocked = False
        self.reported = cursor
        self.renew_at = 0.0
        self.resync_at = 0.0
        self.resync_wanted = False
        self.asks = 0  # explicit resend requests made: a renew repeats the last, so the publisher tells them apart
        #: what this subscription pushed into ``into`` and the flow has not acknowledged (shared across a re-subscribe)
        self.handoff = handoff
        #: owed from before a restart, not yet pushed again (the queue was full): these go before anything new
        self.replay: deque[Owed] = deque()
        self.redelivered = 0
        self.keeps = True  # owed messages kept in the inbox until acknowledged (False: ack="none")

    def ack(self, item: Any) -> bool:
        """The flow is done with ``item`` (a delivery of this subscription): needed with ``ack="explicit"``."""
        if not isinstance(item, dict) or item.get("sid") != self.sid:
            return False  # another subscription's delivery (the same message may come through several)
        seq = item.get("seq")
        return seq.__class__ is int and self.handoff.ack(seq)

    def close(self) -> None:
        """End the lease at the publisher now; the cursor stays, so a later subscribe resumes."""
        self.owner.close_subscription(self)

    def __repr__(self) -> str:
        return f"<Subscription {self.pattern!r} at {self.estate!r} {self.state} cursor {self.cursor}>"


class Subscriber:
    """Subscriptions of the house of ``router``, their inbox at ``inbox``."""

    def __init__(self, router: Any, inbox: str | os.PathLike[str] | Inbox, *, retention: float = 86400.0,
                 report_every: int = 500, period: float = 1.0) -> None:
        self.router = router
        self.inbox = inbox if isinstance(inbox, Inbox) else Inbox(inbox)
        self.retention = retention
        self.report_every = report_every
        self.period = period
        self.scheduler = router.scheduler
        self.clock = self.scheduler.clock.now
        self.counts: Counter[str] = Counter()
        self.hooks = Hooks(HOOKS, "cast subscriber", direct=False)
        self.subs: dict[bytes, Subscription] = {}
        self._arrived: list[tuple[Subscription, Route, Any]] = []
        self._watched: set[bytes] = set()
        self._flushing: Any = None
        self._closed = False
        router.handle(SUBOK, self._on_subok)
        router.handle(BATCH, self._on_batch)
        router.handle(GAP, self._on_gap)
        self._tick = self.scheduler.call_later(period, self._on_tick)
        self._forget_at = self.clock() + 3600.0
        #: sid -> Handoff, for the life of this object: a subscription closed and made again keeps what it owes
        self.handoffs: dict[bytes, Handoff] = {}
        #: sid -> lowest seq loaded to hand over again and not yet pushed (no range acknowledgement below it)
        self._replaying: dict[bytes, int] = {}
        #: the turn's end: acknowledgements, durable tables, the outbox (``settler.outbox``, set by the service)
        self.settler = Settler(self.inbox, self.handoffs, self._replaying.__contains__, self.counts, self._acks_soon)
        self._acking: Any = None
        router.store.on_turn_end(self._settle)

    # -- the API ------------------------------------------------------------------------

    def subscribe(self, pattern: str, *, estate: str | None = None, into: str, split: tuple[str, int, int] | None = None,
                  lease: float = 60.0, yard: str = "", channel: str = "", ack: str = "turn") -> Subscription:
        """Subscribe (or resume: the same estate, pattern, split and queue keep their cursor, and what the
        flow had not acknowledged is handed over again first)."""
        check_pattern(pattern)
        if ack not in ACKS:
            raise ValueError(f"ack is one of {', '.join(ACKS)}, not {ack!r}")
        estate = estate or estate_of(pattern)
        split = tuple(split) if split is not None else None
        key = repr((estate, pattern, split, into))
        found = self.inbox.find(key)
        if found is not None and found[0] in self.subs:
            raise ValueError(f"already subscribed to {pattern!r} at {estate!r} into {into!r}")
        sid, cursor = found if found is not None else (os.urandom(16), 0)
        if found is None:
            self.inbox.add(sid, key)
        store = self.router.store
        queue = store.queue(into)
        handoff = self.handoffs.get(sid)
        if handoff is None:
            handoff = self.handoffs[sid] = Handoff(queue, explicit=ack == "explicit")
        handoff.explicit = ack == "explicit"
        sub = Subscription(self, sid, estate, pattern, split, into, lease, cursor, Route("cast", yard, estate, channel), handoff)
        sub.keeps = ack != "none"
        store.share(sub.share)
        if found is not None:  # owed and not in the queue now: a restart's, or a closed subscription's not yet pushed
            self.settler.commit()  # acknowledgements still pending are not owed any more
            in_queue = handoff.keys()
            acked, upto = self.settler.pending(sid)  # the commit above may have failed: acknowledged all the same
            sub.replay.extend(row for row in self.inbox.owed(sid) if row[1] not in in_queue and row[1] not in acked and row[1] > upto)
            if sub.replay:
                self._replaying[sid] = sub.replay[0][1]
            self._replay(sub)
        if sid not in self._watched:  # once per share: a resumed subscription is found by its sid
            self._watched.add(sid)
            store.queue(sub.share + ".error", 100).watchers.append(lambda share, sid=sid: self._on_error(sid, share))
        self.subs[sid] = sub
        self._send_sub(sub)
        return sub

    def close_subscription(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is None:
            return
        sub.state = "closed"
        self.router.send(sub.at, {"sid": sub.sid}, src=sub.share, tag=UNSUB)

    def close(self) -> None:
        self._settle()
        self.settler.commit()  # the last turns' acknowledgements
        self.router.store.off_turn_end(self._settle)
        for sub in list(self.subs.values()):
            self.close_subscription(sub)
        self._closed = True
        for tag, handler in ((SUBOK, self._on_subok), (BATCH, self._on_batch), (GAP, self._on_gap)):
            self.router.unhandle(tag, handler)
        for sid in self._watched:
            share = self.router.store.get(f"cast.s{sid.hex()}.error")
            if share is not None:
                share.watchers.clear()
        self._tick.cancel()
        if self._flushing is not None:
            self._flushing.cancel()
        if self._acking is not None:
            self._acking.cancel()
        self.inbox.close()

    def ack(self, item: Any) -> bool:
        """The flow is done with ``item`` (``ack="explicit"`` subscriptions); False if nothing owes it."""
        sid = item.get("sid") if isinstance(item, dict) else None
        handoff = self.handoffs.get(sid) if isinstance(sid, bytes) else None
        seq = item.get("seq")
        return handoff is not None and seq.__class__ is int and handoff.ack(seq)  # seqs are ints: anything else owes nothing

    # -- the flow's side ------------------------------------------------------------------

    def table(self, name: str) -> Table:
        """The durable table ``name``: its changes commit with the acknowledgements of the turn that made them."""
        return self.settler.table(name)

    def _acks_soon(self) -> None:
        if self._acking is None and not self._closed:
            self._acking = self.scheduler.call_later(0.0, self._acks_due)

    def _acks_due(self) -> None:
        """This pass's acknowledgements: with the arrivals' commit if one is due now, else alone."""
        self._acking = None
        if self._flushing is None:
            self.settler.commit()

    def _settle(self) -> None:
        """A turn ended (flowcast.cast.settle); then what waited to be handed over again, as room allows."""
        self.settler.turn_end()
        for sub in self.subs.values():
            if sub.replay:
                self._replay(sub)

    def _replay(self, sub: Subscription) -> None:
        """Hand over again what was owed before a restart, as room allows; new messages wait behind it."""
        handoff = sub.handoff
        dst = Route(sub.into, self.router.yard, self.router.estate, "")
        src = Route("cast", "", sub.estate, "")
        while sub.replay and handoff.room() > 0:
            sid, seq, kind, id, name, publisher, stamp, data, upto = sub.replay.popleft()
            if kind == GAP:
                item = envelope(src, dst, GAP, stamp or 0.0, {"from": seq, "upto": upto})
            else:
                item = envelope(src, dst, "cast", stamp, data)
                item.update(name=name, id=id, publisher=publisher, seq=seq)
            item.update(sid=sid, seq=seq, redelivered=True)
            if not handoff.push(item, seq, estimate(data) if data is not None and handoff.queue.budget else 0):
                sub.replay.appendleft((sid, seq, kind, id, name, publisher, stamp, data, upto))  # the byte budget: later
                break
            sub.redelivered += 1
            self.counts["redelivered"] += 1
        if not sub.replay:
            self._replaying.pop(sub.sid, None)
        sub.blocked = bool(sub.replay) or sub.blocked

    # -- sending ------------------------------------------------------------------------

    def _send_sub(self, sub: Subscription, ask: bool = False) -> None:
        """Subscribe, renew and resync are one message: the lease, from the cursor.

        ``ask``: this one asks for what follows the cursor again (a commit failed,
        a batch went missing, room came back), so it carries a new ``ask``
        number; a plain renew repeats the last (see the publisher's _on_sub).
        """
        if ask:
            sub.asks += 1
        now = self.clock()
        sub.renew_at = now + sub.lease / 3
        sub.resync_at = now + self.period  # one resync in flight at a time
        sub.resync_wanted = False
        data: dict[str, Any] = {"sid": sub.sid, "pattern": sub.pattern, "cursor": sub.cursor, "lease": sub.lease, "ask": sub.asks}
        if sub.split is not None:
            data["split"] = list(sub.split)
        sub.reported = sub.cursor
        self.counts["subs_sent"] += 1
        self.router.send(sub.at, data, src=sub.share, tag=SUB)

    def _report(self, sub: Subscription) -> None:
        sub.reported = sub.cursor
        self.counts["cursors_sent"] += 1
        self.router.send(sub.at, {"sid": sub.sid, "cursor": sub.cursor}, src=sub.share, tag=CURSOR)

    def _resync(self, sub: Subscription) -> None:
        """Subscribe again from the cursor: now, or at the tick once a period has passed since the last."""
        if sub.blocked:
            return  # the tick resyncs once there is room
        if self.clock() >= sub.resync_at:
            self.counts["resyncs"] += 1
            if self.hooks.resync is not None:
                self.hooks.resync(sub)
            self._send_sub(sub, ask=True)
        else:
            sub.resync_wanted = True

    # -- arrivals -------------------------------------------------------------------------

    def _mine(self, landing: Landing, sid: bytes) -> Subscription:
        sub = self.subs.get(sid)
        if sub is None or landing.src.estate != sub.estate or landing.dst.share != sub.share:
            landing.refuse("no such subscription here", "no_subscription")
        return sub

    def _on_subok(self, landing: Landing) -> None:
        sid, lease, _low, _high = read_subok(landing.data)
        sub = self._mine(landing, sid)
        sub.state = "active"
        sub.error = None
        if lease < sub.lease:  # renew within what was granted
            sub.renew_at = min(sub.renew_at, self.clock() + lease / 3)

    def _on_batch(self, landing: Landing) -> None:
        batch = read_batch(landing.data)
        self._arrive(self._mine(landing, batch.sid), landing.src, batch)

    def _on_gap(self, landing: Landing) -> None:
        sid, start, upto = read_gap(landing.data)
        self._arrive(self._mine(landing, sid), landing.src, (start, upto))

    def _arrive(self, sub: Subscription, src: Route, what: Any) -> None:
        """Checked, and kept for the end of this turn: one inbox commit (one fsync) for all that came."""
        self._arrived.append((sub, src, what))
        if self._flushing is None:
            self._flushing = self.scheduler.call_later(0.0, self._flush)

    def _flush(self) -> None:
        self._flushing = None
        arrived, self._arrived = self._arrived, []
        plan = _Plan(self)
        for sub, src, what in arrived:
            if self.subs.get(sub.sid) is sub:
                plan.add(sub, src, what)
        acks, ranges = self.settler.take_acks()  # acknowledgements of the turns just ended ride with it
        try:
            self.inbox.commit_many(plan.cursors, plan.rows, plan.owed, acks, ranges)
        except Exception:  # noqa: BLE001 - nothing was pushed: asked for again (at most once a period)
            self.settler.put_back(acks, ranges)
            log.warning("CAST inbox %s: commit failed, %d batches will be sent again", self.inbox.path, len(arrived), exc_info=True)
            self.counts["inbox_failed"] += 1
            for sub in dict.fromkeys(sub for sub, _src, _what in arrived):
                self._resync(sub)
            return
        for sid, cursor in plan.cursors.items():
            self.subs[sid].cursor = cursor
        for sub, queue, item, size in plan.pushes:
            if item["tag"] == GAP:
                sub.gaps.append((item["data"]["from"], item["data"]["upto"]))
                self.counts["gaps"] += 1
                if self.hooks.gap is not None:
                    self.hooks.gap(sub, item["data"]["from"], item["data"]["upto"])
                if sub.replay or not sub.handoff.push(item, item["seq"], force=True):  # past the bound: never the one dropped
                    self._hold(sub, item)
                continue
            if sub.keeps:
                if sub.replay or not sub.handoff.push(item, item["seq"], size):  # room was checked: this fits
                    self._hold(sub, item)
            else:
                queue.push(item, size)
            sub.delivered += 1
            self.counts["delivered"] += 1
            if self.hooks.delivered is not None:
                self.hooks.delivered(sub, item)
        for sub in plan.touched:
            if sub.blocked or sub.cursor - sub.reported >= self.report_every:
                self._report(sub)
        for sub in plan.resync:
            self._resync(sub)

    def _hold(self, sub: Subscription, item: dict[str, Any]) -> None:
        """A committed, owed message the queue refused after all (a watcher filled it, the byte budget
        shrank): it waits in the replay, with what follows it, and no range acknowledgement reaches it."""
        if item["tag"] == GAP:
            row: Owed = (sub.sid, item["seq"], GAP, None, None, None, item["stamp"], None, item["data"]["upto"])
        else:
            row = (sub.sid, item["seq"], "cast", item["id"], item["name"], item["publisher"], item["stamp"], item["data"], None)
        sub.replay.append(row)
        self._replaying.setdefault(sub.sid, row[1])
        sub.blocked = True
        self.counts["held"] += 1

    def _on_error(self, sid: bytes, share: Any) -> None:
        while share.queue:
            report = share.queue.popleft().get("data") or {}
            kind = report.get("kind", "")
            self.counts[f"error_{kind}"] += 1
            sub = self.subs.get(sid)
            if sub is None or kind in TRANSIENT:
                continue  # the renew tries again
            if kind == "no_subscription":  # the lease lapsed there (we were cut off): subscribe again from the cursor
                sub.resync_at = 0.0
                self._resync(sub)
                continue
            sub.state = "refused"
            sub.error = f"{kind}: {report.get('reason', '')}"
            self.subs.pop(sub.sid, None)

    # -- time -------------------------------------------------------------------------------

    def _on_tick(self) -> None:
        if self._closed:
            return
        self.settler.commit()  # a commit that failed at a turn's end, tried again
        now = self.clock()
        for sub in list(self.subs.values()):
            if sub.replay:
                self._replay(sub)
            if sub.blocked and not sub.replay:
                if sub.handoff.room() > 0 and len(sub.handoff) < MAX_OWED:
                    sub.blocked = False
                    self.counts["unblocked"] += 1
                    self._send_sub(sub, ask=True)
                    continue
            if now >= sub.renew_at or (sub.resync_wanted and now >= sub.resync_at):
                self._send_sub(sub, ask=sub.resync_wanted)
            elif sub.cursor != sub.reported:
                self._report(sub)
        if now >= self._forget_at:
            self.inbox.forget(now)
            self._forget_at = now + 3600.0
        self._tick = self.scheduler.call_later(self.period, self._on_tick)


class _Plan:
    """What one turn's batches and gaps do, worked out before anything is committed or pushed.

    Cursors move here, not on the subscriptions, until the inbox has
    committed them: a commit that fails leaves every subscription where it
    was and pushes nothing.
    """

    def __init__(self, owner: Subscriber) -> None:
        self.owner = owner
        self.cursors: dict[bytes, int] = {}
        self.rows: list[tuple[bytes, bytes, float]] = []
        self.owed: list[Owed] = []
        self.pushes: list[tuple[Subscription, Any, dict[str, Any], int]] = []
        self.touched: dict[Subscription, None] = {}
        self.resync: dict[Subscription, None] = {}
        self._seen: dict[bytes, set[bytes]] = {}
        self._room: dict[str, list[int]] = {}  # queue -> [messages, bytes (-1: no budget)] left this turn
        self._until = owner.clock() + owner.retention + _MARGIN

    def add(self, sub: Subscription, src: Route, what: Any) -> None:
        owner = self.owner
        counts = owner.counts
        cursor = self.cursors.get(sub.sid, sub.cursor)
        router = owner.router
        queue = router.store.queue(sub.into)
        dst = Route(sub.into, router.yard, router.estate, "")
        if sub.replay:
            return  # owed from before a restart comes first: the tick asks again once it is handed over
        room = self._room.get(sub.into)
        if room is None:
            room = self._room[sub.into] = [
                queue.bound - len(queue.queue) if queue.bound else 1 << 62,
                queue.budget - queue.held_bytes if queue.budget else -1,
            ]
        if not isinstance(what, Batch):  # a gap: (from, upto)
            start, upto = what
            if start > cursor + 1:
                counts["holes"] += 1
                self.resync[sub] = None
            elif upto > cursor:
                now = owner.clock()
                notice = envelope(src, dst, GAP, now, {"from": cursor + 1, "upto": upto})
                notice.update(sid=sub.sid, seq=cursor + 1, redelivered=False)
                room[0] -= 1  # it takes a place in the queue (past the bound if need be): not one the batches may use
                self.owed.append((sub.sid, cursor + 1, GAP, None, None, None, now, None, upto))
                self.pushes.append((sub, queue, notice, 0))
                self.cursors[sub.sid] = upto
            return
        batch = what
        if batch.upto <= cursor:
            counts["stale_batches"] += 1  # a resend of what is delivered
            return
        if batch.after > cursor:
            counts["holes"] += 1  # a batch went missing: ask again from the cursor
            self.resync[sub] = None
            return
        if sub.blocked:
            return  # the tick asks again once there is room
        if sub.handoff.explicit:  # taken, not acked: held for the consumer, so bounded too
            room[0] = min(room[0], MAX_OWED - len(sub.handoff) - sum(1 for s, _q, _i, _z in self.pushes if s is sub))
        msgs = [msg for msg in batch.msgs if msg[0] > cursor]
        seen = self._seen.get(sub.sid)
        if seen is None:
            seen = self._seen[sub.sid] = set()
        ids = [msg[1] for msg in msgs if msg[1] not in seen]
        seen.update(owner.inbox.seen(sub.sid, ids))
        cursor = batch.upto
        for msg in msgs:
            seq, id, name, publisher, stamp, data = msg
            if id in seen:
                sub.duplicates += 1
                counts["duplicates"] += 1
                if owner.hooks.duplicate is not None:
                    owner.hooks.duplicate(sub, msg)
                continue
            size = estimate(data) if room[1] >= 0 else 0
            if room[0] <= 0 or (room[1] >= 0 and size > room[1]):
                cursor = seq - 1  # back-pressure: the rest comes again once there is room
                sub.blocked = True
                counts["blocked"] += 1
                break
            room[0] -= 1
            if room[1] >= 0:
                room[1] -= size
            seen.add(id)
            self.rows.append((sub.sid, id, self._until))
            item = envelope(src, dst, "cast", stamp, data)
            item.update(name=name, id=id, publisher=publisher, seq=seq, sid=sub.sid, redelivered=False)
            if sub.keeps:
                self.owed.append((sub.sid, seq, "cast", id, name, publisher, stamp, data, None))
            self.pushes.append((sub, queue, item, size))
        self.cursors[sub.sid] = cursor
        self.touched[sub] = None
