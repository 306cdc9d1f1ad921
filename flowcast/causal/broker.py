"""The local broker: one mailbox per subscription, predicate 2, delivery into queue shares.

Why predicate 2 runs here and not at the relay: it is the application's
judgement (permissions, payload validity), and what fails it is still
proof worth forwarding.  So the relay stores and forwards everything a
publisher signed, and only delivery is refused -- with the message kept as
evidence and reported, never dropped in silence.

Why deliveries leave at the end of the turn: every hash delivered in a turn
is written to the ledger in one transaction, and only then are the
messages pushed into the queue shares, so a crash never delivers twice.

Why a delivery stays owed after it is pushed: the queue share is memory, so
a house killed before its flow took (and finished with) a message would
lose it while the ledger says delivered.  The same transaction records it
as owed; it is acknowledged when the turn that took it off the queue ends
(``ack="turn"``, the default: a behaviour that handles what it takes needs
no code) or when the consumer calls ``ack`` (``ack="explicit"``), through
flowcast.store.handoff.  A restarted subscription hands over exactly what
is still owed, in delivery order (a causal order), flagged ``redelivered``,
before anything new.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

from flowcast.causal.deferred import Parked
from flowcast.causal.mailbox import BUFFERED, DEFERRED, DELIVERED, REJECTED, Buffered, Mailbox, Ready
from flowcast.causal.message import CausalError, TopicMsg, decode
from flowcast.store.handoff import Handoff

__all__ = ["ACKS", "Broker", "MAX_OWED", "Subscription", "delivery"]

log = logging.getLogger(__name__)

Predicate = Callable[[TopicMsg], Any]
#: Deferred messages read back and offered again in one pass; the rest go on the next turn, so a delivery
#: that wakes thousands of them does not hold up the house (flowcast/causal/deferred.py says when they wake).
WAKE_PER_PASS = 256
#: Seconds between looks for room in a full queue share while deliveries wait for it.
DRAIN_EVERY = 0.05
#: How a subscription's deliveries are acknowledged: when the turn that took them ends, or by ``ack``.
ACKS = ("turn", "explicit")
#: Deliveries an explicitly acknowledged subscription may hold unacknowledged; past it, delivery waits.
MAX_OWED = 10_000


class Subscription:
    """One subscriber of a topic: its mailbox and the queue share deliveries go into."""

    def __init__(self, broker: "Broker", topic: str, into: str, name: str, predicate: Predicate | None, mailbox: Mailbox,
                 handoff: Handoff) -> None:
        self.broker = broker
        self.topic = topic
        self.into = into
        self.name = name
        self.predicate = predicate
        self.mailbox = mailbox
        self.delivered = 0
        self.rejected = 0
        self.closed = False
        #: deliveries recorded in the ledger but not yet in the queue (it was full)
        self.backlog: deque[dict[str, Any]] = deque()
        #: what was pushed into ``into`` and not acknowledged yet (kept by the broker across a re-subscribe)
        self.handoff = handoff
        self.redelivered = 0

    def ack(self, item: Any) -> bool:
        """The flow is done with ``item``, a delivery of this subscription (``ack="explicit"``); False if not owed."""
        return isinstance(item, dict) and self.handoff.ack(item.get("hash"))

    def close(self) -> None:
        self.broker.unsubscribe(self)

    def __repr__(self) -> str:
        return f"Subscription({self.topic!r} -> {self.into!r})"


def delivery(msg: TopicMsg, lag: float, sub: str = "", redelivered: bool = False) -> dict[str, Any]:
    """What a flow finds in the queue share for one delivered message.

    ``redelivered``: handed over before a crash and perhaps processed then
    (never acknowledged); ``hash`` tells a consumer which one it was.
    """
    return {
        "topic": msg.topic,
        "epoch": msg.epoch,
        "publisher": msg.publisher.hex(),
        "hash": msg.hash.hex(),
        "deps": [d.hash.hex() for d in msg.deps],
        "tags": list(msg.tags),
        "content": msg.content,
        "lag": lag,
        "sub": sub,
        "redelivered": redelivered,
    }


class Broker:
    """Mailboxes for the subscriptions of one house, fed by the relay in store order."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.relay = service.relay
        self.storage = service.storage
        self.ledger = service.ledger
        self.config = service.config
        self.hooks = service.hooks
        self.store = service.router.store
        self.scheduler = service.router.scheduler
        self.clock = self.scheduler.clock.now
        self.counts: Counter[str] = Counter()
        self.subs: dict[str, Subscription] = {}
        self.by_topic: dict[str, list[Subscription]] = {}
        self._outbox: list[tuple[Subscription, Ready, TopicMsg | None]] = []
        self._flushing: Any = None
        self._retry = 0.0
        #: (subscription, deferred messages to read back and offer again), served in turn
        self._wakes: deque[tuple[Subscription, list[Parked]]] = deque()
        self._waking = False
        self._wake_timer: Any = None
        self._draining: Any = None
        #: subscription name -> Handoff, for the life of the broker: a subscription made again keeps what it owes
        self.handoffs: dict[str, Handoff] = {}
        self.store.on_turn_end(self._settle)

    # -- subscriptions ----------------------------------------------------------------

    def subscribe(self, topic: str, into: str, predicate: Predicate | None = None, name: str | None = None,
                  ack: str = "turn") -> Subscription:
        """A mailbox for ``topic`` delivering into ``into``; what a subscription of this name still owes its
        flow (a crash, a closed frame) is handed over again first, flagged ``redelivered``."""
        self.config.topic(topic)
        if ack not in ACKS:
            raise ValueError(f"ack is one of {', '.join(ACKS)}, not {ack!r}")
        queue = self.store.queue(into)
        name = name or f"{topic}>{into}"
        if name in self.subs:
            raise ValueError(f"a causal subscription named {name!r} exists already")
        if predicate is not None and not callable(predicate):
            raise TypeError("a predicate is a callable taking the message")
        mailbox = Mailbox(max_buffered=self.config.max_buffered, max_per_publisher=self.config.max_per_publisher, clock=self.clock)
        delivered = {e: set(h) for e, h in self.ledger.delivered(name).items() if self.relay.is_open(topic, e)}
        seqs = sorted(h.seq for h in self.relay.index.values() if h.topic == topic)
        if delivered:  # a restart: what it delivered before, and which of those nothing delivered names (its frontier)
            named: set[bytes] = set()
            order: dict[int, list[bytes]] = {}
            for _seq, msg in self._read(seqs):
                if msg.hash in delivered.get(msg.epoch, ()):
                    order.setdefault(msg.epoch, []).append(msg.hash)
                    named.update(dep.hash for dep in msg.deps)
            for epoch, hashes in delivered.items():
                mailbox.load(epoch, hashes, [h for h in order.get(epoch, ()) if h not in named])
        handoff = self.handoffs.get(name)
        if handoff is None or handoff.queue is not queue:
            handoff = self.handoffs[name] = Handoff(queue)
        handoff.explicit = ack == "explicit"
        sub = Subscription(self, topic, into, name, predicate, mailbox, handoff)
        self.subs[name] = sub
        self.by_topic.setdefault(topic, []).append(sub)
        self._redeliver(sub)
        self._replay(sub, seqs)
        return sub

    def _redeliver(self, sub: Subscription) -> None:
        """Hand over again, in delivery order, what ``sub``'s name owes and is not in its queue now.

        The ledger keeps the cache seq, not the bytes: a message the cache's
        retention expired while owed cannot be handed over again, and is
        reported abandoned (``expired_while_owed``) instead of vanishing.
        """
        in_queue = sub.handoff.keys()
        rows = [row for row in self.ledger.owed(sub.name) if row[0].hex() not in in_queue]
        gone: list[tuple[str, bytes]] = []
        for start in range(0, len(rows), 500):
            chunk = rows[start:start + 500]
            wires = self.storage.get([seq for _h, _e, seq in chunk])
            for digest, epoch, seq in chunk:
                wire = wires.get(seq)
                try:
                    msg = decode(wire) if wire is not None else None
                except CausalError:
                    msg = None
                if msg is None or msg.hash != digest:
                    gone.append((sub.name, digest))
                    self.counts["expired_while_owed"] += 1
                    self._abandon(sub, Buffered(digest, b"", epoch, (), seq, None, 0, self.clock()), "expired_while_owed")
                    continue
                self._push(sub, delivery(msg, 0.0, sub.name, redelivered=True))
                sub.redelivered += 1
                self.counts["redelivered"] += 1
        if gone:
            try:
                self.ledger.acknowledge(gone)  # said above; owing them for ever would report them at every start
            except Exception:  # noqa: BLE001 - then they are reported again at the next start
                log.warning("causal: the ledger %s could not drop %d owed deliveries it cannot read back", self.ledger.path,
                            len(gone), exc_info=True)

    def unsubscribe(self, sub: Subscription) -> None:
        if sub.closed or self.subs.get(sub.name) is not sub:  # a handle closed before: the live one of its name stays
            return
        del self.subs[sub.name]
        self.by_topic[sub.topic].remove(sub)
        sub.closed = True
        # recorded as delivered but never handed over: no longer delivered, so the next subscription of this name gets them
        self._outbox = [entry for entry in self._outbox if entry[0] is not sub]
        self._forget_backlog(sub)

    def _read(self, seqs: list[int]) -> Iterator[tuple[int, TopicMsg]]:
        """(seq, message) read back from storage in batches; what expired or does not decode is skipped."""
        for start in range(0, len(seqs), 500):
            wires = self.storage.get(seqs[start:start + 500])
            for seq in seqs[start:start + 500]:
                wire = wires.get(seq)
                if wire is None:
                    continue
                try:
                    yield seq, decode(wire)
                except CausalError:
                    self.counts["unreadable"] += 1

    def _replay(self, sub: Subscription, seqs: list[int]) -> None:
        """Offer stored messages again, in store order (a new subscription, a restart, deferred ones)."""
        for seq, msg in self._read(seqs):
            held = self.relay.index.get(msg.hash)
            self.offer(sub, msg, seq, held.source if held is not None else "")

    # -- offering ---------------------------------------------------------------------

    def stored(self, msg: TopicMsg, seq: int, source: str) -> None:
        """The relay stored ``msg``: offer it to every subscription of its topic."""
        for sub in list(self.by_topic.get(msg.topic, ())):
            try:
                self.offer(sub, msg, seq, source)
            except Exception:  # noqa: BLE001 - one subscription's failure must not take the message from the others
                self.counts["offer_failed"] += 1
                log.exception("causal: offering %r to %r failed", msg, sub)

    def offer(self, sub: Subscription, msg: TopicMsg, seq: int, source: str) -> str:
        box = sub.mailbox
        digest = msg.hash
        if box.is_delivered(digest, msg.epoch) or digest in box.buffered or digest in box.rejected:
            return "duplicate"
        relay = self.relay
        held = relay.index.get(digest)
        if digest in relay.rejected or ((held is None or held.unsure) and relay.forged_ref(msg)):
            # a dep stored after it came, named with a forged hsig (what came after its deps was checked then)
            self._refuse_forged(msg)
            return REJECTED
        for dep in msg.deps:
            found = relay.rejected.get(dep.hash)
            if found is not None and dep.hash not in box.rejected:
                self.reject(sub, dep.hash, dep.publisher, msg.epoch, found[2])
            held = relay.index.get(dep.hash)
            if held is not None and held.epoch != msg.epoch:  # deps never cross epochs: it could never be delivered
                self.reject(sub, digest, msg.publisher, msg.epoch, "cross_epoch")
                return REJECTED
        reason = self._judge(sub, msg)
        if reason:
            self.service.keep_evidence(msg, "predicate", None, reason)
            self.reject(sub, digest, msg.publisher, msg.epoch, reason)
            return REJECTED
        if any(dep.hash in box.rejected for dep in msg.deps):  # here, so what already waits for it is reported too
            self.reject(sub, digest, msg.publisher, msg.epoch, "dep_rejected")
            return REJECTED
        status, ready = box.offer(digest, msg.publisher, msg.epoch, tuple(d.hash for d in msg.deps), seq)
        if box.swept:
            swept, box.swept = box.swept, []
            for entry, why in swept:
                self._rejected(sub, sub.topic, entry.hash, entry.publisher, why)
        if status == BUFFERED:
            entry = box.buffered[digest]
            if self.hooks.buffered is not None:
                self.hooks.buffered(sub, entry)
            self.service.sync.want(msg, source, box)
        elif status == DEFERRED:
            self.service.sync.want(msg, source, box, "deferred")
        elif status == REJECTED:
            self._rejected(sub, msg.topic, digest, msg.publisher, box.rejected.get(digest, (0, "dep_rejected"))[1])
        if ready:
            first = msg if status == DELIVERED else None
            for item in ready:
                self._outbox.append((sub, item, first if item.hash == digest else None))
            if self._flushing is None:
                self._flushing = self.scheduler.call_later(0.0, self.flush)
        if box.woken or (box.deferred and status != DEFERRED):
            self._wake(sub)
        return status

    def _refuse_forged(self, msg: TopicMsg) -> None:
        """``msg`` is rejected at the relay (a forged reference found after it was stored): in every mailbox of
        its topic too, so whether it is delivered never depends on which of it and its dep came first."""
        reason = self.relay.rejected.get(msg.hash, (msg.topic, msg.epoch, "bad_dep_signature"))[2]
        if msg.hash not in self.relay.rejected:
            self.counts["bad_dep_signature"] += 1
            self.relay.reject(msg, reason)
        for sub in list(self.by_topic.get(msg.topic, ())):
            box = sub.mailbox
            if msg.hash not in box.rejected and not box.is_delivered(msg.hash, msg.epoch):
                self.reject(sub, msg.hash, msg.publisher, msg.epoch, reason)

    def _wake(self, sub: Subscription) -> None:
        """Offer again what ``sub``'s mailbox says is due (Mailbox.due): at most WAKE_PER_PASS now, the rest
        on the next turns, in turn with the other subscriptions."""
        due = sub.mailbox.due()
        if due:
            self._wakes.append((sub, due))
            self._work()

    def _work(self) -> None:
        if self._waking:  # an offer made here woke more: they are served by the loop below
            return
        self._waking = True
        done = 0
        try:
            while self._wakes and done < WAKE_PER_PASS:
                sub, entries = self._wakes[0]
                chunk = entries[-64:]
                del entries[-64:]
                if entries:
                    self._wakes.rotate(-1)
                else:
                    self._wakes.popleft()
                if sub.closed:
                    continue
                done += len(chunk)
                self.counts["reoffered"] += len(chunk)
                try:
                    self._replay(sub, sorted(entry.seq for entry in chunk))
                except Exception:  # noqa: BLE001 - one subscription's failure must not stop the others' wake-ups
                    self.counts["offer_failed"] += 1
                    log.exception("causal: offering deferred messages to %r again failed", sub)
        finally:
            self._waking = False
        if self._wakes and self._wake_timer is None and not self.service._closed:
            self._wake_timer = self.scheduler.call_later(0.0, self._work_due)

    def _work_due(self) -> None:
        self._wake_timer = None
        self._work()

    def _judge(self, sub: Subscription, msg: TopicMsg) -> str:
        """Predicate 2: '' if valid, else the reason."""
        if sub.predicate is None:
            return ""
        try:
            verdict = sub.predicate(msg)
            if verdict is None or verdict is True:
                return ""
            if isinstance(verdict, str):  # a reason
                return verdict[:200] or "invalid"
            return "" if bool(verdict) else "invalid"  # 1, numpy's True: valid; 0, False: not
        except Exception as error:  # noqa: BLE001 - the application's code: its failure refuses the message, not the house
            self.counts["predicate_failed"] += 1
            log.warning("causal: the predicate of %r raised on %r", sub, msg, exc_info=True)
            try:
                return f"predicate_raised: {type(error).__name__}: {error}"[:200]
            except Exception:  # noqa: BLE001 - an exception whose str() raises too
                return f"predicate_raised: {type(error).__name__}"

    def reject(self, sub: Subscription, digest: bytes, publisher: bytes, epoch: int, reason: str) -> None:
        """Reject ``digest`` in ``sub``'s mailbox, with everything buffered that depends on it."""
        gone = sub.mailbox.reject(digest, reason, epoch)
        self._rejected(sub, sub.topic, digest, publisher, reason)
        for entry in gone:
            if entry.hash != digest:
                self._rejected(sub, sub.topic, entry.hash, entry.publisher, "dep_rejected")
        if sub.mailbox.woken or (gone and sub.mailbox.deferred):
            self._wake(sub)

    def _rejected(self, sub: Subscription, topic: str, digest: bytes, publisher: bytes, reason: str) -> None:
        sub.rejected += 1
        self.counts["rejected"] += 1
        self.service.note("rejected", topic, digest, {"publisher": publisher.hex(), "reason": reason, "sub": sub.name})
        if self.hooks.rejected is not None:
            self.hooks.rejected(sub, topic, digest, publisher, reason)

    # -- delivering -------------------------------------------------------------------

    def flush(self) -> None:
        """Record this turn's deliveries, then push them: ledger first, so a crash never delivers twice."""
        self._flushing = None
        if self.service._closed:  # nothing is recorded or handed over after close: a restart offers them again
            self._outbox = []
            return
        out, self._outbox = self._outbox, []
        if not out:
            return
        out = self._read_back(out)
        try:
            self.ledger.commit([(sub.name, ready.epoch, ready.hash) for sub, ready, _m in out],
                               [(sub.name, ready.epoch, ready.hash, ready.seq) for sub, ready, _m in out])
        except Exception:  # noqa: BLE001 - a disk error: keep them and try again, never push unrecorded
            self.counts["ledger_failed"] += 1
            log.warning("causal: the ledger %s could not record %d deliveries; retrying", self.ledger.path, len(out), exc_info=True)
            self._outbox = out + self._outbox
            self._retry = min(max(self._retry * 2, 0.1), 5.0)
            self._flushing = self.scheduler.call_later(self._retry, self.flush)
            return
        self._retry = 0.0
        for sub, ready, msg in out:
            self._push(sub, delivery(msg, ready.lag, sub.name))
            sub.delivered += 1
            if self.hooks.delivered is not None:
                self.hooks.delivered(sub, ready)
        self.resume()

    def _read_back(self, out: list[tuple[Subscription, Ready, TopicMsg | None]]) -> list[tuple[Subscription, Ready, TopicMsg]]:
        """The messages of ``out`` read back from storage, in order; one that expired from the cache while
        buffered (past retention) is abandoned -- said, not skipped -- and so is everything released
        after it that names it, since a message is never delivered before its deps."""
        wires = self.storage.get([ready.seq for _s, ready, msg in out if msg is None])
        kept = []
        lost: set[tuple[str, bytes]] = set()
        for sub, ready, msg in out:
            reason = ""
            if msg is None:
                wire = wires.get(ready.seq)
                try:
                    msg = decode(wire) if wire is not None else None
                except CausalError:
                    msg = None
                if msg is None:
                    reason = "expired_from_storage"
            if msg is not None and lost and any((sub.name, dep.hash) in lost for dep in msg.deps):
                reason = "dep_expired"
            if reason:
                lost.add((sub.name, ready.hash))
                sub.mailbox.undeliver(ready.hash, ready.epoch, reason)
                self.counts["unreadable"] += 1
                self._abandon(sub, ready, reason)
                swept, sub.mailbox.swept = sub.mailbox.swept, []
                for entry, why in swept:  # buffered ones naming it, still waiting for something else
                    self._abandon(sub, entry, why)
                continue
            kept.append((sub, ready, msg))
        return kept

    def _abandon(self, sub: Subscription, entry: Any, reason: str) -> None:
        """Never to be delivered, and said: the share ``causal.abandoned`` and the ``abandoned`` event."""
        self.service.note("abandoned", sub.topic, entry.hash, {"reason": reason, "sub": sub.name, "publisher": entry.publisher.hex(),
                                                              "epoch": entry.epoch})
        if self.hooks.abandoned is not None:
            self.hooks.abandoned(sub, entry, [])

    def _push(self, sub: Subscription, item: dict[str, Any]) -> None:
        if sub.closed:
            return
        if sub.backlog or not self._hand(sub, item):
            sub.backlog.append(item)
            self.counts["backlogged"] += 1
            if self._draining is None:
                self._draining = self.scheduler.call_later(DRAIN_EVERY, self.drain_backlogs)

    def drain_backlogs(self) -> None:
        """Move what waits for room into the queue shares, in order; look again soon while anything waits.

        A flow takes items off its queue without telling anyone, so the only way to learn that there is
        room again is to look: every DRAIN_EVERY seconds, and only while a backlog exists.
        """
        self._draining = None
        waiting = False
        for sub in self.subs.values():
            if sub.backlog:
                while sub.backlog and self._hand(sub, sub.backlog[0]):
                    sub.backlog.popleft()
                waiting = waiting or bool(sub.backlog)
        if waiting and not self.service._closed:
            self._draining = self.scheduler.call_later(DRAIN_EVERY, self.drain_backlogs)

    @staticmethod
    def _hand(sub: Subscription, item: dict[str, Any]) -> bool:
        """Push ``item`` into the queue and owe it; False when there is no room (the queue's, or, for an
        explicitly acknowledged subscription, MAX_OWED)."""
        handoff = sub.handoff
        if handoff.explicit and len(handoff) >= MAX_OWED:
            return False
        return handoff.push(item, item["hash"])

    def _settle(self) -> None:
        """A turn ended: what the flows took (or acked) is no longer owed; one commit for all of it."""
        rows = []
        for name, handoff in self.handoffs.items():
            if len(handoff):
                rows.extend((name, bytes.fromhex(key)) for key in handoff.settled())
        if not rows:
            return
        try:
            self.ledger.acknowledge(rows)
        except Exception:  # noqa: BLE001 - still owed on disk: handed over again after a restart, never lost
            self.counts["ack_failed"] += len(rows)
            log.warning("causal: the ledger %s could not record %d acknowledgements; they are redelivered after a restart",
                        self.ledger.path, len(rows), exc_info=True)
        else:
            self.counts["acked"] += len(rows)

    def ack(self, item: Any) -> bool:
        """The flow is done with ``item`` (a delivery of an ``ack="explicit"`` subscription); False if nothing owes it."""
        handoff = self.handoffs.get(item.get("sub")) if isinstance(item, dict) else None
        return handoff is not None and handoff.ack(item.get("hash"))

    def _forget_backlog(self, sub: Subscription) -> None:
        """``sub`` closes with deliveries never handed over: un-record the new ones (the next subscription of its
        name delivers them); redelivered ones stay owed -- their successors may be delivered already."""
        fresh = [bytes.fromhex(item["hash"]) for item in sub.backlog if not item["redelivered"]]
        sub.backlog.clear()
        if fresh:
            self._forget_delivered(sub.name, fresh)

    def _forget_delivered(self, name: str, hashes: list[bytes]) -> None:
        """Un-record deliveries never handed over (a closed subscription's backlog): delivered again later."""
        try:
            self.ledger.undeliver(name, hashes)
        except Exception:  # noqa: BLE001 - then they stay recorded: lost to this subscription, and said so
            self.counts["undeliver_failed"] += len(hashes)
            log.warning("causal: %d deliveries of %s were recorded but never handed over, and could not be un-recorded",
                        len(hashes), name, exc_info=True)

    def resume(self) -> None:
        """Offer again the deferred messages that are due in every mailbox (room came back, or a dep they
        wait for was delivered or rejected)."""
        for sub in list(self.subs.values()):
            if sub.mailbox.deferred or sub.mailbox.woken:
                self._wake(sub)

    def close(self) -> None:
        """Stop: nothing more is recorded or handed over, and what was recorded but still waits for room in
        a queue is un-recorded, so the house started again delivers both (never twice: the ledger decides).
        What the flows took in the last turn is acknowledged; what sits in their queues stays owed."""
        self._settle()
        self.store.off_turn_end(self._settle)
        if self._wake_timer is not None:
            self._wake_timer.cancel()
            self._wake_timer = None
        self._wakes.clear()
        if self._draining is not None:
            self._draining.cancel()
            self._draining = None
        for sub in self.subs.values():  # recorded, never handed over: the restarted house delivers them again
            self._forget_backlog(sub)

    # -- epochs -----------------------------------------------------------------------

    def close_epoch(self, topic: str, epoch: int) -> list[tuple[Subscription, Buffered, list[bytes]]]:
        out = []
        for sub in self.by_topic.get(topic, ()):
            box = sub.mailbox
            missing = {e.hash: box.missing_of(e) for e in box.buffered.values() if e.epoch == epoch}
            for entry in box.close_epoch(epoch):
                out.append((sub, entry, missing.get(entry.hash, [])))
            try:
                self.ledger.forget(sub.name, epoch + 1)
            except Exception:  # noqa: BLE001 - rows of a closed epoch are never loaded again; pruned next time
                self.counts["forget_failed"] += 1
                log.warning("causal: the ledger %s could not prune epoch %d", self.ledger.path, epoch, exc_info=True)
        return out
