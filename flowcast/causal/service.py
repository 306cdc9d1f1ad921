"""CausalService: a house's relay, broker and sync for causal topics, in ``house.causal``.

It lives in the house that holds the estate's CAST cache, because the cache
is its Local Storage.  Flows reach it through the stock behaviours
``causal publish`` and ``causal subscribe``; Python through
:meth:`publish`, :meth:`genesis` and :meth:`subscribe`.

What cannot be delivered is kept in shares a person or a flow can read,
each with one field per topic: ``causal.missing`` (dependencies being
fetched, since when, how often asked), ``causal.rejected``,
``causal.abandoned``, ``causal.equivocations`` and ``causal.gaps``.
Each field is a map from hash hex to details, at most ``NOTE_LIMIT``
entries (the counts in :meth:`status` stay exact).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from nacl.signing import SigningKey

from flowcast.causal.broker import Broker, Predicate, Subscription
from flowcast.causal.config import CausalConfig
from flowcast.causal.depwait import DepWait
from flowcast.causal.heads import HeadsExchange
from flowcast.causal.hooks import HOOKS
from flowcast.causal.ledger import Ledger
from flowcast.causal.message import EPOCH_TAG, CausalError, TopicMsg, TopicMsgID, make
from flowcast.causal.relay import Relay
from flowcast.causal.storage import LocalStorage
from flowcast.causal.sync import ACCESS, FETCH_SHARE, Sync
from flowcast.transport.hooks import Hooks

__all__ = ["CausalService", "Published"]

log = logging.getLogger(__name__)

NOTE_LIMIT = 1000
_NOTES = ("missing", "rejected", "abandoned", "equivocations", "gaps")


class Published:
    """A publish on its way to the disk: ``done`` once durable (then forwarded), or ``error``."""

    __slots__ = ("msg", "done", "error", "seq")

    def __init__(self, msg: TopicMsg) -> None:
        self.msg = msg
        self.done = False
        self.error: BaseException | None = None
        self.seq = 0

    @property
    def id(self) -> TopicMsgID:
        return self.msg.id

    def __repr__(self) -> str:
        return f"Published({self.msg!r}, done={self.done}, error={self.error!r})"


class CausalService:
    """Causal topics for the house of ``router``, stored in ``cast``'s cache, recorded in ``state``."""

    def __init__(self, router: Any, cast: Any, config: CausalConfig, *, state: str | os.PathLike[str],
                 signers: Mapping[str, SigningKey] | None = None, follow: bool = True) -> None:
        self.router = router
        self.cast = cast
        self.config = config
        self.signers = dict(signers or {})
        for topic, key in self.signers.items():
            found = config.topic(topic)
            if bytes(key.verify_key) not in found.publishers:
                raise CausalError(f"this estate signs {topic!r} with a key that is not one of its publishers", "not_publisher")
        self.scheduler = router.scheduler
        self.clock = self.scheduler.clock.now
        self.hooks = Hooks(HOOKS, "causal", direct=False)
        self.counts: Counter[str] = Counter()
        self.ledger = Ledger(state)
        self.storage = LocalStorage(cast, router.estate)
        self.relay = Relay(self.storage, config, self.clock, self._stored, self._dropped, self.keep_evidence, self._opened)
        self.broker = Broker(self)
        self.sync = Sync(self)
        self.heads = HeadsExchange(self, self.sync, FETCH_SHARE, ACCESS)
        self.waits = DepWait(self.scheduler, self.held_id, lambda t, c, tags, deps: self.publish(t, c, tags=tags, deps=deps))
        self._published: dict[bytes, Published] = {}
        self._evidence: Counter[tuple[bytes, str, int]] = Counter()
        self._closers: dict[str, Any] = {}
        self._closed = False
        store = router.store
        self._shares = {kind: store.share(f"causal.{kind}") for kind in _NOTES}
        self._notes: dict[tuple[str, str], dict[str, Any]] = {}
        known = self.ledger.epochs()
        self._geneses = {(t, current): TopicMsgID(*g) for t, (current, _closed, g) in known.items() if g is not None}
        self.relay.rebuild(known)
        for topic, epoch in self.relay.current.items():  # an epoch found only in the cache: recorded now, with its genesis
            recorded = known.get(topic)
            if epoch and (recorded is None or epoch > recorded[0] or recorded[2] is None):
                self._record_genesis(topic, epoch)
        for topic, (epoch, until) in self.relay.closing.items():  # a restart within grace: it still closes
            self._closers[topic] = self.scheduler.call_later(max(0.0, until - self.clock()),
                                                             lambda t=topic, e=epoch: self._close_epoch(t, e))
        if follow:  # False: fetch from the peers, but take nothing from them unasked (tests, fetch-only estates)
            self.sync.follow_peers(cast)
        self._epoch_timers: dict[str, Any] = {}
        if config.epoch_every is not None:
            for topic, key in self.signers.items():
                if bytes(key.verify_key) == config.topic(topic).owner:
                    self._epoch_timers[topic] = self.scheduler.call_later(config.epoch_every, lambda t=topic: self._next_epoch(t))

    def attach(self, house: Any) -> "CausalService":
        """Put this service in ``house.causal`` and close it with the house."""
        house.causal = self
        house.on_close(self.close)
        return self

    # -- publishing ---------------------------------------------------------------------

    def publish(self, topic: str, content: bytes, *, tags: Iterable[str] = (),
                deps: Iterable[TopicMsgID] | None = None) -> Published:
        """Sign and store ``content``; ``deps`` None names the topic's frontier and this publisher's previous message."""
        key = self._signer(topic)
        publisher = bytes(key.verify_key)
        epoch = self.relay.current.get(topic, 0)
        tags = [tags] if isinstance(tags, str) else list(tags)
        if EPOCH_TAG in tags:  # else this estate would sign a message its own relay keeps as evidence against it
            raise CausalError(f"the tag {EPOCH_TAG!r} is reserved: epochs are opened with genesis()", "bad_tag")
        if deps is None:
            chosen = self.frontier(topic, publisher, epoch)
        else:  # the chain is kept whatever the caller names: two messages with no previous one are an equivocation
            chosen = [d for d in deps if d.publisher != publisher] + self.frontier(topic, publisher, epoch, limit=0)
            for dep in chosen:
                held = self.relay.index.get(dep.hash)
                if held is not None and held.epoch != epoch:  # never deliverable, and it would become the chain's tip
                    raise CausalError(f"dep {dep.hash.hex()[:16]}... is of epoch {held.epoch}, the topic is in epoch {epoch}: "
                                      "deps never cross epochs", "cross_epoch")
        return self._submit(make(key, topic, content, epoch=epoch, deps=chosen, tags=tags))

    def publish_waiting(self, topic: str, content: bytes, *, deps: Iterable[TopicMsgID | bytes], tags: Iterable[str] = (),
                        wait: float | None = None) -> Any:
        """As :meth:`publish`, with deps that may be hashes this relay has not stored yet.

        The publish waits up to ``wait`` seconds (the layout's ``dep_wait``
        when None) for each to be stored, then goes; past it, the ticket is
        refused ``unknown_dep``.  A ticket like publish's (``done``,
        ``error``, ``msg``, ``seq``); what can be refused at once is raised.
        """
        self._signer(topic)  # no key: refused now, not after the wait
        tags = [tags] if isinstance(tags, str) else list(tags)
        return self.waits.add(topic, content, tags, list(deps), self.config.dep_wait if wait is None else wait)

    def held_id(self, topic: str, digest: bytes) -> TopicMsgID | None:
        """The id of the stored message ``digest`` of ``topic`` to depend on; None while this relay has not stored it.

        CausalError if it never can be a dep of a new message here: it is
        of another topic (``unknown_dep``) or epoch (``cross_epoch``).
        """
        held = self.relay.index.get(digest)
        if held is None:
            return None
        if held.topic != topic:
            raise CausalError(f"message {digest.hex()[:16]}... is of another topic than {topic!r}", "unknown_dep")
        current = self.relay.current.get(topic, 0)
        if held.epoch != current:  # deps never cross epochs: the message could never be delivered
            raise CausalError(f"message {digest.hex()[:16]}... is of epoch {held.epoch}, topic {topic!r} is in epoch {current}: "
                              "deps never cross epochs", "cross_epoch")
        return TopicMsgID(held.publisher, digest, held.hsig)

    def genesis(self, topic: str) -> Published:
        """Open the topic's next epoch (the owner's key only)."""
        key = self._signer(topic)
        if bytes(key.verify_key) != self.config.topic(topic).owner:
            raise CausalError(f"only the owner of {topic!r} opens its epochs", "not_owner")
        return self._submit(make(key, topic, b"", epoch=self.relay.current.get(topic, 0) + 1, tags=[EPOCH_TAG]))

    def _next_epoch(self, topic: str) -> None:
        """The owner's configured period: open the next epoch, and again after another period."""
        if self._closed:
            return
        done = self.genesis(topic)
        if done.error is not None:
            log.warning("causal: topic %s could not open its next epoch: %s", topic, done.error)
        self._epoch_timers[topic] = self.scheduler.call_later(self.config.epoch_every, lambda: self._next_epoch(topic))

    def frontier(self, topic: str, publisher: bytes, epoch: int, limit: int = 62) -> list[TopicMsgID]:
        """Deps for a new message: this publisher's previous one (or the genesis), and the newest heads."""
        relay = self.relay
        out: dict[bytes, TopicMsgID] = {}
        tip = relay.tips.get((topic, publisher, epoch))
        if tip is None and epoch:
            tip = relay.genesis.get((topic, epoch))
        for digest in ([tip] if tip is not None else []) + (self._heads(topic, epoch, limit) if limit else []):
            found = self._id_of(digest)
            if found is not None and (found.publisher != publisher or digest == tip):
                out[digest] = found
        return list(out.values())

    def _heads(self, topic: str, epoch: int, limit: int) -> list[bytes]:
        """What a new message builds on: the newest delivered heads of the topic's first subscription here.

        Not the relay's heads: a relay holds what it cannot deliver too (a message naming a dep that
        never existed), and naming that would make this honest message wait for it everywhere.
        Only with no subscription here are the relay's heads all there is to go by.
        """
        subs = self.broker.by_topic.get(topic)
        if subs:
            return subs[0].mailbox.frontier(epoch, limit)
        return list(self.relay.heads.get((topic, epoch), ()))[-limit:]

    def _id_of(self, digest: bytes) -> TopicMsgID | None:
        held = self.relay.index.get(digest)
        if held is not None:
            return TopicMsgID(held.publisher, digest, held.hsig)
        pending = self.relay.pending.get(digest)
        if pending is not None:
            return pending[0].id
        for (_topic, _epoch), found in self._geneses.items():  # a genesis the cache expired: the ledger kept its id
            if found.hash == digest:
                return found
        return None

    def _signer(self, topic: str) -> SigningKey:
        self.config.topic(topic)
        key = self.signers.get(topic)
        if key is None:
            raise CausalError(f"this estate has no key to publish to {topic!r} (give it in signers / sign_as)", "no_key")
        return key

    def _submit(self, msg: TopicMsg) -> Published:
        ticket = Published(msg)
        self._published[msg.hash] = ticket
        outcome = self.relay.accept(msg.wire, "", msg)
        if outcome != "stored":
            self._published.pop(msg.hash, None)
            ticket.error = CausalError(f"the relay refused the message: {outcome}", outcome)
            ticket.done = True
        return ticket

    # -- from the relay -------------------------------------------------------------------

    def _stored(self, msg: TopicMsg, seq: int, source: str) -> None:
        if self._closed:  # a write that completed as the cache closed: it is stored; a restart rebuilds from it
            return
        ticket = self._published.pop(msg.hash, None)
        if ticket is not None:
            ticket.seq, ticket.done = seq, True
        if self.hooks.stored is not None:
            self.hooks.stored(msg.topic, msg, seq, source)
        self.sync.arrived(msg, source)
        self.broker.stored(msg, seq, source)
        self.waits.stored(msg.hash)

    def _dropped(self, topic: str | None, reason: str, source: str, publisher: bytes | None) -> None:
        self.counts[f"dropped_{reason}"] += 1
        if self.hooks.dropped is not None:
            self.hooks.dropped(topic, reason, source, publisher)

    def keep_evidence(self, msg: TopicMsg, kind: str, other: bytes | None = None, reason: str = "") -> None:
        """Keep a signed message that proves misbehaviour (``other``: the message it equivocates with); report it."""
        reason = reason or kind
        cap = (msg.publisher, "equivocation" if other is not None else kind, msg.epoch)
        if other is not None:  # reported every time (the share, the event); only the disk writes are capped
            self.note("equivocations", msg.topic, msg.hash, {"publisher": msg.publisher.hex(), "other": other.hex()})
            if self.hooks.equivocation is not None:
                self.hooks.equivocation(msg.topic, msg.publisher, other, msg.hash)
        if self._evidence[cap] >= self.config.evidence_cap:
            self.counts["evidence_over_cap"] += 1
            return
        if other is not None:  # an equivocation: both messages are the proof
            kind, reason = "equivocation", f"claims the same place as {other.hex()}"
            other_wire = self._wire_of(other)
            if other_wire is not None:
                self.ledger.keep(other, "equivocation", msg.topic, msg.publisher, f"claims the same place as {msg.hash.hex()}",
                                 msg.hash, self.clock(), other_wire)
        if self.ledger.keep(msg.hash, kind, msg.topic, msg.publisher, reason, other, self.clock(), msg.wire):
            self._evidence[cap] += 1  # only what is new counts: judging one message again (a re-entered frame) is not more proof
            self.counts[f"evidence_{kind}"] += 1

    def _wire_of(self, digest: bytes) -> bytes | None:
        held = self.relay.index.get(digest)
        if held is not None:
            return self.storage.get([held.seq]).get(held.seq)
        pending = self.relay.pending.get(digest)
        return pending[0].wire if pending is not None else None

    # -- epochs ---------------------------------------------------------------------------

    def _opened(self, topic: str, epoch: int) -> None:
        """``epoch`` opened: older epochs close now, the one before after the grace period."""
        olds = {e for sub in self.broker.by_topic.get(topic, ()) for e in sub.mailbox.epochs() if e < epoch - 1}
        for old in sorted(olds | ({epoch - 2} if epoch >= 2 else set())):
            self._close_epoch(topic, old)
        previous = self._closers.pop(topic, None)
        if previous is not None:
            previous.cancel()
        if epoch >= 1:
            self._closers[topic] = self.scheduler.call_later(self.config.grace, lambda: self._close_epoch(topic, epoch - 1))
        self._record_genesis(topic, epoch)

    def _record_genesis(self, topic: str, epoch: int) -> None:
        digest = self.relay.genesis.get((topic, epoch))
        held = self.relay.index.get(digest) if digest is not None else None
        if held is not None:
            self._geneses[(topic, epoch)] = TopicMsgID(held.publisher, digest, held.hsig)
            try:
                self.ledger.opened(topic, epoch, (held.publisher, digest, held.hsig))
            except Exception:  # noqa: BLE001 - kept in memory; the cache still has it, and the next open records it
                self.counts["record_failed"] += 1
                log.warning("causal: the ledger %s could not record epoch %d of %s", self.ledger.path, epoch, topic, exc_info=True)

    def _close_epoch(self, topic: str, epoch: int) -> None:
        if self._closed:
            return
        if epoch <= self.relay.closed.get(topic, -1):
            return
        final = self.relay.current.get(topic, 0) > epoch
        if final:  # recorded first: a crash after this never reopens the epoch whose delivered set goes next
            try:
                self.ledger.closed(topic, epoch)
            except Exception:  # noqa: BLE001 - a disk error: the epoch stays open (and delivered once) until it can close
                self.counts["close_failed"] += 1
                log.warning("causal: the ledger %s could not record epoch %d of %s closed; retrying", self.ledger.path, epoch, topic,
                            exc_info=True)
                self._closers[topic] = self.scheduler.call_later(5.0, lambda: self._close_epoch(topic, epoch))
                return
            self.relay.closed[topic] = epoch
        for sub, entry, missing in self.broker.close_epoch(topic, epoch):  # before the relay forgets the epoch
            self.note("abandoned", topic, entry.hash, {"sub": sub.name, "publisher": entry.publisher.hex(), "epoch": epoch,
                                                       "missing": [m.hex() for m in missing[:8]]})
            if self.hooks.abandoned is not None:
                self.hooks.abandoned(sub, entry, missing)
        if final:
            self.relay.prune(topic, epoch + 1)
            for key in [k for k in self._geneses if k[0] == topic and k[1] <= epoch]:
                del self._geneses[key]
        self.sync.forget_epoch(topic, epoch)
        for key in [k for k in self._evidence if k[2] <= epoch]:
            del self._evidence[key]
        self.broker.resume()
        self.counts["epochs_closed"] += 1

    # -- subscribing -------------------------------------------------------------------

    def subscribe(self, topic: str, into: str, *, predicate: Predicate | None = None, name: str | None = None,
                  ack: str = "turn") -> Subscription:
        """Deliver ``topic`` in causal order into the queue share ``into``; ``predicate`` is predicate 2.

        ``ack``: ``turn`` (a delivery is acknowledged when the turn that took
        it from the queue ends) or ``explicit`` (when :meth:`ack` is called).
        What is not acknowledged is handed over again after a crash, first,
        flagged ``redelivered``.
        """
        return self.broker.subscribe(topic, into, predicate, name, ack)

    def ack(self, item: Any) -> bool:
        """The flow is done with ``item``, a delivery of an ``ack="explicit"`` subscription; False if nothing owes it."""
        return self.broker.ack(item)

    # -- shares and status ---------------------------------------------------------------

    def note(self, kind: str, topic: str, digest: bytes, detail: dict[str, Any]) -> None:
        """Show ``digest`` in ``causal.<kind>`` under ``topic`` (at most NOTE_LIMIT per topic)."""
        self.counts[f"noted_{kind}"] += 1
        notes = self._notes.setdefault((kind, topic), {})
        key = digest.hex()
        if key not in notes and len(notes) >= NOTE_LIMIT:
            self.counts[f"notes_over_{kind}"] += 1
            return
        notes[key] = detail
        self._shares[kind][topic or "-"] = dict(notes)

    def unnote(self, kind: str, topic: str, digest: bytes) -> None:
        notes = self._notes.get((kind, topic))
        if notes is not None and notes.pop(digest.hex(), None) is not None:
            self._shares[kind][topic or "-"] = dict(notes)

    def status(self) -> dict[str, Any]:
        relay = self.relay
        return {
            "topics": {t: {"epoch": relay.current.get(t, 0),
                           "held": sum(held[0] for (topic, _p, _e), held in relay.history.items() if topic == t),
                           "full": {publisher.hex(): {"epoch": epoch, "refused": refused}
                                    for (topic, publisher, epoch), refused in relay.full.items() if topic == t}}
                       for t in self.config.topics},
            "relay": dict(relay.counts),
            "sync": {"missing": len(self.sync.missing), **self.sync.counts, **self.heads.counts},
            "intake": self.sync.intake.status(),
            "broker": dict(self.broker.counts),
            "waiting": {"publishes": self.waits.waiting, "bytes": self.waits.bytes, **self.waits.counts},
            "subscriptions": [
                {"name": s.name, "topic": s.topic, "into": s.into, "delivered": s.delivered, "rejected": s.rejected,
                 "buffered": len(s.mailbox.buffered), "deferred": len(s.mailbox.deferred),
                 "deferrals": s.mailbox.counts["deferred"], "deferred_publishers": len(s.mailbox.deferred.by_publisher), "backlog": len(s.backlog),
                 "owed": len(s.handoff), "redelivered": s.redelivered}
                for s in self.broker.subs.values()
            ],
            "counts": dict(self.counts),
        }

    def in_flight(self) -> int:
        """Publishes made here that are not durable yet (a stop drains them: flowcast.house.drain)."""
        return len(self._published)

    def drain_report(self) -> list[bytes]:
        """The hashes of the publishes made here that are still not known durable, for a stop to report.

        The cache's close still writes what it has queued, so these may
        survive; a stop says which ones it could not see stored.
        """
        return [digest for digest, ticket in self._published.items() if not ticket.done]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.waits.close()
        self.sync.close()
        self.heads.close()
        for closer in [*self._closers.values(), *self._epoch_timers.values()]:
            closer.cancel()
        self.broker.close()
        self.ledger.close()
