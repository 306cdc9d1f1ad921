"""The topic relay: predicate 1, dedupe by hash, equivocation, epochs (docs/causal.md, "Predicate 1").

Why the relay checks only the signature and the shape: everything signed
by a publisher of the topic is worth keeping and passing on, even content
the application will refuse -- it is proof of what that publisher did, and
every estate should be able to see it.  What nobody on the topic signed is
stopped here, before it costs storage or bandwidth anywhere (no spam, no
amplification).

Nothing waits here: an accepted message is queued for the disk at once and
handed on (``on_stored``) in the order the disk stored it.

Why ``accept`` takes a ``durable`` callback: a message leaves one durable
store only when the next has it.  What feeds the relay from another store
(its CAST subscriptions to peer relays) must not acknowledge a message
until this relay's own write is on disk -- the write is asynchronous (the
cache's group commit), so "accepted" is not yet "kept".  The callback says
when the sender's copy is no longer needed: stored here (now, or by an
earlier arrival still on its way to the disk), or refused for good; or
that the write failed and the copy must be offered again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from flowcast.causal.config import CausalConfig
from flowcast.causal.index import Held, HeldIndex
from flowcast.causal.message import CausalError, TopicMsg, decode, verify_id
from flowcast.causal.storage import LocalStorage

__all__ = ["Durable", "Held", "Relay"]

#: Called once per ``accept``: True when the sender's copy is no longer needed, False when the write failed.
Durable = Callable[[bool], Any]

log = logging.getLogger(__name__)

#: Rejected hashes remembered across the open epochs (each a few hundred bytes): a publisher flooding
#: signed junk is bounded here as its evidence is in the ledger (the cap per publisher, kind and epoch).
MAX_REJECTED = 100_000


class Relay:
    """One estate's relay for the topics of ``config``; stores in ``storage``."""

    def __init__(self, storage: LocalStorage, config: CausalConfig, clock: Callable[[], float],
                 on_stored: Callable[[TopicMsg, int, str], Any], on_drop: Callable[[str | None, str, str, bytes | None], Any],
                 on_evidence: Callable[..., Any], on_epoch: Callable[[str, int], Any]) -> None:
        self.storage = storage
        self.config = config
        self.clock = clock
        self._on_stored = on_stored
        self._on_drop = on_drop
        self._on_evidence = on_evidence
        self._on_epoch = on_epoch
        self.counts: Counter[str] = Counter()
        #: hash -> Held, for messages stored in the open epochs (packed: flowcast/causal/index.py)
        self.index = HeldIndex(self._read_hsig)
        #: hash -> (message, source): accepted, waiting for the disk
        self.pending: dict[bytes, tuple[TopicMsg, str]] = {}
        #: pending hashes some dep of which was not held when they were accepted (:meth:`forged_ref` later)
        self._unsure: set[bytes] = set()
        #: hash -> who waits to hear that the pending write of it is durable (or failed)
        self._waiting: dict[bytes, list[Durable]] = {}
        #: hash -> (topic, epoch, reason): signed, but failed the shape rules (or a dep of it did)
        self.rejected: dict[bytes, tuple[str, int, str]] = {}
        #: (topic, epoch) -> {prev hash (or the publisher's key, for a chain's first) -> the hash that claimed it first}
        self.claims: dict[tuple[str, int], dict[bytes, bytes]] = {}
        #: (topic, publisher, epoch, prev hash or key) -> first claimant, where another publisher's message claimed
        #: that prev first (a dep naming a publisher that did not sign it, not held here yet): rare
        self.odd_claims: dict[tuple[str, bytes, int, bytes], bytes] = {}
        #: (topic, publisher, epoch) -> the newest hash of the publisher's chain seen here
        self.tips: dict[tuple[str, bytes, int], bytes] = {}
        #: (topic, epoch) -> hashes accepted here that no accepted message names yet
        self.heads: dict[tuple[str, int], dict[bytes, None]] = {}
        #: topic -> the newest epoch opened here
        self.current: dict[str, int] = {t: 0 for t in config.topics}
        #: topic -> (epoch, until): the epoch before the current one, open until ``until``
        self.closing: dict[str, tuple[int, float]] = {}
        #: (topic, epoch) -> the genesis hash
        self.genesis: dict[tuple[str, int], bytes] = {}
        #: topic -> the newest epoch closed here (-1: none): never open again, even after a restart
        self.closed: dict[str, int] = {}
        #: (topic, publisher, epoch) -> [messages, wire bytes] held here (stored or pending): its epoch's history
        self.history: dict[tuple[str, bytes, int], list[int]] = {}
        #: (topic, publisher, epoch) -> messages refused ``epoch_full`` (the history reached a budget)
        self.full: dict[tuple[str, bytes, int], int] = {}
        #: every publisher key of every topic, mapped to itself
        self._keys: dict[bytes, bytes] = {k: k for t in config.topics.values() for k in t.publishers}

    # -- predicate 1 ------------------------------------------------------------------

    def accept(self, wire: Any, source: str = "", msg: TopicMsg | None = None, durable: Durable | None = None) -> str:
        """Check and, if new and valid, store ``wire``; the outcome ('stored' or the drop reason).

        ``durable`` (the module says why) is called once: True when this relay holds the message on disk
        or refused it for good, False when its write failed (``store_*``).
        """
        outcome = self._accept(wire, source, msg, durable)
        if durable is not None and outcome != "stored" and outcome != "pending":
            durable(not outcome.startswith("store_"))
        return "duplicate" if outcome == "pending" else outcome

    def _accept(self, wire: Any, source: str, msg: TopicMsg | None, durable: Durable | None) -> str:
        try:
            if msg is None:
                msg = decode(wire)
            topic = self.config.topic(msg.topic)
        except CausalError as error:
            return self._drop(getattr(msg, "topic", None), error.reason, source, getattr(msg, "publisher", None))
        if msg.publisher not in topic.publishers:  # of this topic: a key may publish to one topic and not another
            return self._drop(msg.topic, "not_publisher", source, msg.publisher)
        # one copy of each topic name and key for everything kept per message (about 120 B each)
        msg.topic, msg.publisher = topic.name, self._keys[msg.publisher]
        digest = msg.hash
        if digest in self.index or digest in self.pending or digest in self.rejected:
            self._drop(msg.topic, "duplicate", source, msg.publisher)
            if durable is not None and digest in self.pending:  # not on disk yet: hear when it is
                self._waiting.setdefault(digest, []).append(durable)
                return "pending"
            return "duplicate"
        if not verify_id(msg.publisher, digest, msg.hsig):
            return self._drop(msg.topic, "bad_signature", source, msg.publisher)
        window = self._window(msg, topic.owner)
        if window:
            return self._drop(msg.topic, window, source, msg.publisher)
        shape = self._shape(msg, topic.owner, topic.publishers) or self._held_refs(msg)
        if shape:
            self.reject(msg, shape)
            return self._drop(msg.topic, shape, source, msg.publisher)
        if self._over_history(msg):
            return self._drop(msg.topic, "epoch_full", source, msg.publisher)
        self._claim(msg)
        self.pending[digest] = (msg, source)
        if any(dep.hash not in self.index and dep.hash not in self.pending for dep in msg.deps):
            self._unsure.add(digest)
        try:
            ticket = self.storage.put(msg)
        except Exception as error:  # noqa: BLE001 - busy, full, closed: counted; the sender's copy stays
            self.pending.pop(digest, None)
            self._unsure.discard(digest)
            self._unclaim(msg)
            return self._drop(msg.topic, f"store_{getattr(error, 'reason', 'failed')}", source, msg.publisher)
        if durable is not None:
            self._waiting.setdefault(digest, []).append(durable)
        ticket.add_done(lambda done, digest=digest: self._stored(done, digest))
        self.counts["accepted"] += 1
        return "stored"

    def _over_history(self, msg: TopicMsg) -> bool:
        """Count ``msg`` into its publisher's history of its epoch, or say it is over a budget (and count that)."""
        chain = (msg.topic, msg.publisher, msg.epoch)
        held = self.history.get(chain)
        if held is None:
            held = self.history[chain] = [0, 0]
        size = len(msg.wire)
        if held[0] < self.config.epoch_max_messages and held[1] + size <= self.config.epoch_max_bytes:
            held[0] += 1
            held[1] += size
            return False
        refused = self.full.get(chain, 0)
        if not refused:
            log.warning("causal: publisher %s holds %d messages (%d bytes) in epoch %d of %s, its budget "
                        "(epoch_max_messages %d, epoch_max_bytes %d): its further messages of the epoch are refused "
                        "until the next epoch opens", msg.publisher.hex()[:16], held[0], held[1], msg.epoch, msg.topic,
                        self.config.epoch_max_messages, self.config.epoch_max_bytes)
        self.full[chain] = refused + 1
        return True

    def _unhistory(self, msg: TopicMsg) -> None:
        held = self.history.get((msg.topic, msg.publisher, msg.epoch))
        if held is not None:
            held[0] -= 1
            held[1] -= len(msg.wire)

    def _window(self, msg: TopicMsg, owner: bytes) -> str:
        current = self.current.get(msg.topic, 0)
        epoch = msg.epoch
        # only the owner's genesis may open an epoch ahead: anyone else's "genesis" of a far epoch would
        # pass the window, be rejected and kept as evidence once per epoch it names (a cap per epoch)
        if epoch == current or (epoch > current and msg.is_genesis and msg.publisher == owner and not msg.deps):
            return ""
        if epoch == current + 1:
            return ""  # its genesis is on the way; the mailbox waits for it (rule 6)
        if epoch > current:
            return "epoch_unknown"
        closing = self.closing.get(msg.topic)
        if closing is not None and closing[0] == epoch and self.clock() < closing[1]:
            return ""
        return "epoch_closed"

    @staticmethod
    def _shape(msg: TopicMsg, owner: bytes, publishers: frozenset[bytes]) -> str:
        own = 0
        by_owner = False
        for dep in msg.deps:
            if dep.publisher not in publishers:
                return "dep_not_publisher"
            if dep.publisher == msg.publisher:
                own += 1
            if dep.publisher == owner:
                by_owner = True
        if own > 1:
            return "two_own_deps"
        if msg.is_genesis:
            return "" if msg.publisher == owner and not msg.deps else "bad_genesis"
        if msg.epoch >= 1 and own == 0 and not by_owner:
            return "no_genesis_dep"
        return ""

    def _held_refs(self, msg: TopicMsg) -> str:
        """A dep held here, stored or still on its way to the disk, named with another signature or
        publisher must verify (deps not held are verified before they are fetched, in sync; one that
        arrives after ``msg`` is compared when ``msg`` is offered: :meth:`forged_ref`)."""
        return "bad_dep_signature" if self.forged_ref(msg) else ""

    def forged_ref(self, msg: TopicMsg) -> bool:
        """True if ``msg`` names a message held here with a signature or publisher that does not verify.

        Only a named id that differs from the held one costs a verify, so an
        honest message costs a lookup (and at most a short keyed hash) per dep.
        """
        index, pending = self.index, self.pending
        for dep in msg.deps:
            held = index.get(dep.hash)
            if held is not None:
                same = held.signed_by(dep.publisher, dep.hsig)
            else:
                waiting = pending.get(dep.hash)
                if waiting is None:
                    continue
                same = dep.hsig == waiting[0].hsig and dep.publisher == waiting[0].publisher
            if not same and not verify_id(dep.publisher, dep.hash, dep.hsig):
                return True
        return False

    def _read_hsig(self, seq: int) -> bytes | None:
        """The signature of the message stored at ``seq``, read back (the index keeps only recent ones whole)."""
        wire = self.storage.get([seq]).get(seq)
        try:
            return decode(wire).hsig if wire is not None else None
        except CausalError:
            return None

    def reject(self, msg: TopicMsg, reason: str) -> None:
        """``msg`` is signed by its publisher but breaks the rules: remember its hash (what names it is
        rejected, not missing) and keep it as evidence."""
        if len(self.rejected) < MAX_REJECTED:
            self.rejected[msg.hash] = (msg.topic, msg.epoch, reason)
        else:
            self.counts["rejected_over_cap"] += 1  # what names it waits as missing until its epoch closes
        self._on_evidence(msg, reason, None)

    def _claim_slot(self, msg: TopicMsg) -> tuple[dict[Any, bytes], Any]:
        """Where ``msg``'s claim to its place is kept: by the prev hash (the decoded dep's own bytes, no
        copy) in its topic and epoch, or, where another publisher claimed that prev first, by the whole key."""
        prev = msg.prev
        key = prev.hash if prev is not None else msg.publisher
        table = self.claims.get((msg.topic, msg.epoch))
        if table is None:
            table = self.claims[(msg.topic, msg.epoch)] = {}
        first = table.get(key)
        if first is not None and first != msg.hash and self._publisher_of(first) not in (None, msg.publisher):
            return self.odd_claims, (msg.topic, msg.publisher, msg.epoch, key)
        return table, key

    def _publisher_of(self, digest: bytes) -> bytes | None:
        held = self.index.get(digest)
        if held is not None:
            return held.publisher
        pending = self.pending.get(digest)
        return pending[0].publisher if pending is not None else None

    def _claim(self, msg: TopicMsg) -> None:
        """Record which message claims each (publisher, epoch, prev); a second claimant is an equivocation."""
        prev = msg.prev
        table, key = self._claim_slot(msg)
        first = table.get(key)
        if first is None:
            table[key] = msg.hash
            chain = (msg.topic, msg.publisher, msg.epoch)
            if prev is None or self.tips.get(chain) == prev.hash:
                self.tips[chain] = msg.hash
        elif first != msg.hash:
            self.counts["equivocations"] += 1
            self._on_evidence(msg, "equivocation", first)
        heads = self.heads.setdefault((msg.topic, msg.epoch), {})
        for dep in msg.deps:
            heads.pop(dep.hash, None)
        heads[msg.hash] = None
        if msg.is_genesis:
            self.genesis.setdefault((msg.topic, msg.epoch), msg.hash)

    def _unclaim(self, msg: TopicMsg) -> None:
        """Undo :meth:`_claim` for a message the disk refused: it was never stored, so it claims no place
        (else the publisher's next message, finding no previous, would equivocate with it), nor history."""
        self._unhistory(msg)
        prev = msg.prev
        table, key = self._claim_slot(msg)
        if table.get(key) == msg.hash:
            del table[key]
        chain = (msg.topic, msg.publisher, msg.epoch)
        if self.tips.get(chain) == msg.hash:
            if prev is not None:
                self.tips[chain] = prev.hash
            else:
                del self.tips[chain]
        heads = self.heads.get((msg.topic, msg.epoch))
        if heads is not None and heads.pop(msg.hash, 1) is None:
            for dep in msg.deps:
                if dep.hash in self.index:
                    heads[dep.hash] = None
        if msg.is_genesis and self.genesis.get((msg.topic, msg.epoch)) == msg.hash:
            del self.genesis[(msg.topic, msg.epoch)]

    def _stored(self, ticket: Any, digest: bytes) -> None:
        msg, source = self.pending.pop(digest, (None, ""))
        unsure = digest in self._unsure
        self._unsure.discard(digest)
        if not self.pending:
            self.pending = {}  # a dict never shrinks: the table a burst grew goes with it
            self._unsure = set()
        waiting = self._waiting.pop(digest, ())
        if msg is None:
            return
        if ticket.error is not None:
            self.counts["store_failed"] += 1
            log.warning("causal: %r could not be stored (%s); it is not forwarded or delivered", msg, ticket.error)
            self._unclaim(msg)
            self._on_drop(msg.topic, "store_failed", source, msg.publisher)
            for durable in waiting:
                durable(False)
            return
        self.index.put(digest, msg.topic, msg.epoch, msg.publisher, msg.hsig, ticket.seq, source, unsure)
        for durable in waiting:  # on disk: the copies that fed it may go
            durable(True)
        self.counts["stored"] += 1
        if msg.is_genesis and msg.epoch > self.current.get(msg.topic, 0):
            self.open_epoch(msg.topic, msg.epoch)
        self._on_stored(msg, ticket.seq, source)

    def _drop(self, topic: str | None, reason: str, source: str, publisher: bytes | None) -> str:
        self.counts[f"dropped_{reason}"] += 1
        self._on_drop(topic, reason, source, publisher)
        return reason

    # -- epochs -----------------------------------------------------------------------

    def open_epoch(self, topic: str, epoch: int) -> None:
        """Make ``epoch`` current: the one before closes after ``grace``, older ones at once."""
        previous = self.current.get(topic, 0)
        self.current[topic] = epoch
        self.closing[topic] = (epoch - 1, self.clock() + self.config.grace)
        self._on_epoch(topic, epoch)  # first: what closes at once is reported from the index before it is pruned
        self.prune(topic, epoch - 1)
        log.info("causal: topic %s opened epoch %d (was %d)", topic, epoch, previous)

    def prune(self, topic: str, keep_from: int) -> int:
        """Forget ``topic``'s epochs before ``keep_from``: index, claims, heads, rejected ids."""
        old = [h for h, held in self.index.items() if held.topic == topic and held.epoch < keep_from]
        for digest in old:
            del self.index[digest]
        for key in [k for k in self.claims if k[0] == topic and k[1] < keep_from]:
            del self.claims[key]
        for key in [k for k in self.odd_claims if k[0] == topic and k[2] < keep_from]:
            del self.odd_claims[key]
        for key in [k for k in self.tips if k[0] == topic and k[2] < keep_from]:
            del self.tips[key]
        for key in [k for k in self.heads if k[0] == topic and k[1] < keep_from]:
            del self.heads[key]
        for key in [k for k in self.genesis if k[0] == topic and k[1] < keep_from]:
            del self.genesis[key]
        for table in (self.history, self.full):
            for key in [k for k in table if k[0] == topic and k[2] < keep_from]:
                del table[key]
        for digest in [h for h, (t, e, _r) in self.rejected.items() if t == topic and e < keep_from]:
            del self.rejected[digest]
        return len(old)

    def is_open(self, topic: str, epoch: int) -> bool:
        if epoch <= self.closed.get(topic, -1):
            return False
        current = self.current.get(topic, 0)
        if epoch >= current:
            return epoch <= current + 1
        closing = self.closing.get(topic)
        return closing is not None and closing[0] == epoch and self.clock() < closing[1]

    # -- asking -----------------------------------------------------------------------

    def holds(self, digest: bytes) -> bool:
        """Stored or on its way to the disk here."""
        return digest in self.index or digest in self.pending

    def rebuild(self, known: Mapping[str, tuple[int, int, Any]] | None = None) -> int:
        """Index what the cache holds (after a restart): the messages of each topic's open epochs.

        ``known``: topic -> (current epoch, newest closed epoch, ...) as the ledger recorded them.  The
        current epoch is the newer of that and the newest genesis in the cache (which may have expired
        one); an epoch recorded closed stays closed, and the one before the current, if it had not
        closed, gets a fresh grace period (when its genesis arrived is not kept).
        """
        for topic, (current, closed, _genesis) in (known or {}).items():
            if topic in self.config.topics:
                self.current[topic] = max(self.current.get(topic, 0), current)
                self.closed[topic] = max(self.closed.get(topic, -1), closed)
                if _genesis is not None:  # its message may have expired from the cache; its id is what counts
                    self.genesis.setdefault((topic, current), _genesis[1])
        found: list[tuple[int, TopicMsg]] = []
        for seq, wire in self.storage.scan():
            try:
                msg = decode(wire)
            except CausalError:
                self.counts["rebuild_undecodable"] += 1
                continue
            if msg.topic not in self.config.topics:
                continue
            found.append((seq, msg))
            if msg.is_genesis and msg.epoch > self.current.get(msg.topic, 0):
                self.current[msg.topic] = msg.epoch
        for topic, epoch in self.current.items():
            if epoch and epoch - 1 > self.closed.get(topic, -1):
                self.closing[topic] = (epoch - 1, self.clock() + self.config.grace)
        kept = 0
        for seq, msg in found:
            if not self.is_open(msg.topic, msg.epoch) or msg.hash in self.index:
                continue
            self._claim(msg)
            held = self.history.setdefault((msg.topic, msg.publisher, msg.epoch), [0, 0])
            held[0] += 1  # what the cache holds counts, even past a budget lowered since
            held[1] += len(msg.wire)
            self.index.put(msg.hash, msg.topic, msg.epoch, msg.publisher, msg.hsig, seq, "")
            kept += 1
        return kept
