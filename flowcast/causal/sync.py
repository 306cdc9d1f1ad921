"""Dependency sync: fetch what a buffered message waits for; forward between relays with CAST.

Why fetch from the relay that sent the dependent message first: it stored
that message, so it most likely stored what the message names too.  Then
the other peers in turn, with exponential back-off, for as long as the
epoch is open -- never "give up after N tries", which is how a gap
becomes silent loss.  The missing ids, since when, and how often they were
asked for are in the share ``causal.missing`` at all times.

Why the relay acknowledges its CAST feed itself, and late: a message leaves
one durable store only when the next has it.  A peer relay's messages
arrive through a CAST subscription whose inbox would otherwise count them
acknowledged when the turn that took them ended -- before this relay's own
(asynchronous, group-committed) write reached the disk, so a kill -9 in
between lost them at this hop for good, with nothing left to ask for them
again (a CAST-only upstream answers no fetch).  So the subscription is
``ack="explicit"`` and each message is acknowledged once the relay's store
has it (or refused it for good); one whose write failed is offered again.

Why dependencies are verified before they are fetched: a message may name
an id nobody signed (a forged reference, or a publisher inventing one).
Its hsig is checked under the named publisher first; a reference that
does not verify is *rejected*, with what depends on it, and nobody is
asked for it.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import Any

from flowcast.causal.intake import Intake
from flowcast.causal.mailbox import Mailbox
from flowcast.causal.message import MAX_DEPS, TopicMsg, verify_id
from flowcast.routing import Landing, Route
from flowcast.routing.policy import declare_access

__all__ = ["ACCESS", "FETCH", "FETCH_SHARE", "HAVE", "Missing", "Sync", "from_share"]

FETCH = "causal.fetch"
HAVE = "causal.have"
FETCH_SHARE = "causal"
ACCESS = declare_access("causal")
#: Ids wanted with no buffered message waiting for them (announced heads, deps of deferred messages) at
#: once; each is fetched until it arrives or its epoch closes, and one over the cap is wanted again later.
MAX_UNWAITED = 4096
#: The most bytes of messages one ``causal.have`` carries; the rest are asked for again.
HAVE_BYTES = 256 << 10
#: Seconds before a message from a peer whose write here failed (a busy or full disk) is offered again.
RETRY_STORE = 1.0
#: Seconds acknowledgements of the peers' feeds may wait for a turn of this house's flows to settle them.
SETTLE_WITHIN = 0.05


def from_share(peer: str) -> str:
    """The queue share a peer relay's messages arrive in (through the CAST subscription)."""
    return "causal.from." + re.sub(r"[^A-Za-z0-9_]", "_", peer)


class Missing:
    """A dependency some buffered message waits for and this estate does not hold."""

    __slots__ = ("topic", "epoch", "publisher", "hash", "hsig", "since", "tries", "next_at", "sources", "asked", "why", "by")

    def __init__(self, topic: str, epoch: int, publisher: bytes, hash: bytes, hsig: bytes, since: float, sources: list[str],
                 why: str = "dep", by: Any = "") -> None:
        self.topic = topic
        self.epoch = epoch
        self.publisher = publisher
        self.hash = hash
        #: the signature it was first named with (verified): another one must verify too
        self.hsig = hsig
        self.since = since
        self.tries = 0
        self.next_at = since
        self.sources = sources
        self.asked = ""
        #: "dep": a buffered message waits for it; "head": a peer announced it; "deferred": a message
        #: deferred over a buffer cap names it (neither is in a mailbox's waiters, so the tick keeps them)
        self.why = why
        #: whose quota it counts in: the announcing estate (a head), the deferred message's publisher
        self.by = by

    def view(self) -> dict[str, Any]:
        view = {"since": self.since, "tries": self.tries, "asked": self.asked, "epoch": self.epoch}
        if self.why == "head":
            view["head_of"] = self.sources[0]
        elif self.why == "deferred":
            view["for"] = "deferred"
        return view


class Sync:
    """Missing dependencies of one house's mailboxes, and the fetches that fill them."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.router = service.router
        self.relay = service.relay
        self.config = service.config
        self.scheduler = self.router.scheduler
        self.clock = self.scheduler.clock.now
        self.counts: Counter[str] = Counter()
        self.missing: dict[bytes, Missing] = {}
        #: kind ("head", "deferred") -> ids wanted with no buffered message waiting for them
        self._wanted: Counter[str] = Counter()
        #: (kind, announcer or publisher) -> its part of that
        self._quota: Counter[tuple[str, Any]] = Counter()
        self._timer: Any = None
        self._due = float("inf")
        self._closed = False
        self._cast: Any = None
        #: (peer, CAST delivery) whose write here failed: offered again after RETRY_STORE, still unacknowledged
        self._unstored: list[tuple[str, dict[str, Any]]] = []
        self._retrying: Any = None
        self._settling: Any = None
        #: the peers' feeds, offered to the relay in turns between topics and publishers
        self.intake = Intake(self.scheduler, self._offer)
        store = self.router.store
        store.share(FETCH_SHARE)
        store.queue(FETCH_SHARE + ".error", 100).watchers.append(self._on_error)
        self.router.handle(FETCH, self._on_fetch, access=ACCESS)
        self.router.handle(HAVE, self._on_have, access=ACCESS)

    # -- relay to relay, through CAST ------------------------------------------------------

    def follow_peers(self, cast: Any) -> None:
        """Subscribe with CAST to each peer relay's stored messages of every topic, acknowledged explicitly:
        a message is acknowledged to the inbox only once this relay's store has it (the module says why)."""
        self._cast = cast
        for peer in self.config.peers:
            into = from_share(peer)
            queue = self.router.store.queue(into)
            queue.watchers.append(lambda share, peer=peer: self._arrived_from(peer, share))
            for topic in self.config.topics:
                cast.subscribe(f"{peer}/causal/{topic}", estate=peer, into=into, ack="explicit")

    def _arrived_from(self, peer: str, share: Any) -> None:
        queue = share.queue
        while queue:
            item = queue.popleft()
            if item.get("tag") == "cast":
                self.intake.put(peer, item)
            else:  # a CAST gap: the peer's cache expired messages before they reached us
                self.counts["peer_gaps"] += 1
                self.service.note("gaps", "", hashlib.blake2b(repr(item.get("data")).encode(), digest_size=8).digest(),
                                  {"peer": peer, "range": item.get("data")})
                self._ack(item)

    def _offer(self, peer: str, item: dict[str, Any]) -> None:
        """Give a peer's message to the relay; acknowledge it to the CAST inbox when it is durable here."""
        def durable(ok: bool) -> None:
            if ok:
                self._ack(item)
            elif not self._closed:  # still owed to the inbox: offered again soon, and after a restart in any case
                self.counts["store_retries"] += 1
                self._unstored.append((peer, item))
                if self._retrying is None:
                    self._retrying = self.scheduler.call_later(RETRY_STORE, self._retry_unstored)

        self.relay.accept(item.get("data"), peer, durable=durable)

    def _retry_unstored(self) -> None:
        self._retrying = None
        if self._closed:
            return
        again, self._unstored = self._unstored, []
        for peer, item in again:
            self._offer(peer, item)

    def _ack(self, item: dict[str, Any]) -> None:
        """Acknowledge ``item`` to the CAST inbox; the inbox settles acknowledgements when a turn of this house
        ends, so make sure one does soon even in a house that runs no flows (its skedder never ticks)."""
        if self._cast is None or not self._cast.ack(item):
            return
        if self._settling is None and not self._closed:
            self._settling = self.scheduler.call_later(SETTLE_WITHIN, self._settle)

    def _settle(self) -> None:
        """Between two ticks every behaviour has returned, so ending a turn here acknowledges nothing early."""
        self._settling = None
        if not self._closed:
            self.router.store.end_turn()

    # -- wanting ---------------------------------------------------------------------------

    def want(self, msg: TopicMsg, source: str, box: Mailbox, why: str = "dep") -> None:
        """``msg`` was buffered (or deferred: ``why``) in ``box``: ask for each of its deps nobody here holds.

        A deferred message's deps are fetched too: the buffered messages may
        all be waiting for it, and then nothing else would ever ask for them.
        """
        topic = self.config.topics[msg.topic]
        now = self.clock()
        for dep in msg.deps:
            digest = dep.hash
            if box.is_delivered(digest, msg.epoch) or digest in box.buffered or self.relay.holds(digest):
                continue
            found = self.missing.get(digest)
            if found is not None and (dep.hsig == found.hsig and dep.publisher == found.publisher):
                if source and source not in found.sources:
                    found.sources.append(source)
                if why == "dep" and found.why != "dep":
                    self._promote(found)  # now a buffered message waits for it: asked for until its epoch closes
                continue
            if digest in box.rejected:
                continue
            if found is None and why != "dep" and not self._room(why, msg.publisher):  # before the verify: no crypto
                self.counts["unwaited_over_cap"] += 1  # wanted again when the message is offered again
                continue
            if dep.publisher not in topic.publishers or not verify_id(dep.publisher, digest, dep.hsig):
                # The reference is forged, not the message it names: reject the message that makes it
                # (signed by its publisher: proof) and what depends on it.  Rejecting the named hash
                # would let anyone censor a real message by naming it with a bad signature first.
                self.counts["bad_dep_signature"] += 1
                self.relay.reject(msg, "bad_dep_signature")
                for sub in list(self.service.broker.by_topic.get(msg.topic, ())):
                    if msg.hash not in sub.mailbox.rejected:
                        self.service.broker.reject(sub, msg.hash, msg.publisher, msg.epoch, "bad_dep_signature")
                return
            if found is not None:  # named again with another signature, which verified: the same message
                if source and source not in found.sources:
                    found.sources.append(source)
                if why == "dep" and found.why != "dep":
                    self._promote(found)
                continue
            sources = ([source] if source else []) + [p for p in self.config.peers if p != source]
            by = msg.publisher if why == "deferred" else ""
            self.missing[digest] = Missing(msg.topic, msg.epoch, dep.publisher, digest, dep.hsig, now, sources, why, by)
            self._count(why, by, 1)
            self.counts["wanted" if why == "dep" else f"wanted_{why}"] += 1
            self.service.note("missing", msg.topic, digest, self.missing[digest].view())
            self._arm_at(now, now)  # asked at once; entries already wanted keep their times

    def want_head(self, topic: str, epoch: int, publisher: bytes, digest: bytes, hsig: bytes, source: str) -> str:
        """A peer holds ``digest`` and nothing it holds names it: fetch it unless held, known bad or unsigned.

        Returns '' when nothing was to be done (held here, or already wanted), else what happened.
        """
        relay = self.relay
        found = self.missing.get(digest)
        if found is not None:
            if hsig != found.hsig and not verify_id(found.publisher, digest, hsig):
                return "bad_signature"
            if source not in found.sources:
                found.sources.append(source)
            return ""
        if relay.holds(digest):
            return ""
        if digest in relay.rejected:
            return "rejected"
        if not relay.is_open(topic, epoch):
            return "epoch_closed"
        if publisher not in self.config.topics[topic].publishers or not verify_id(publisher, digest, hsig):
            return "bad_signature"  # the announcer lied: nobody on the topic signed this id
        if self._wanted["head"] >= MAX_UNWAITED:
            return "over_cap"
        if not self._room("head", source):
            return "over_quota"  # one peer announcing signed ids nobody can fetch must not crowd out the others
        now = self.clock()
        self.missing[digest] = Missing(topic, epoch, publisher, digest, hsig, now,
                                       [source] + [p for p in self.config.peers if p != source], "head", source)
        self._count("head", source, 1)
        self.counts["wanted_heads"] += 1
        self.service.note("missing", topic, digest, self.missing[digest].view())
        self._arm_at(now, now)
        return "wanted"

    def _unwaited(self) -> int:
        """How many wanted ids no buffered message waits for (announced heads, deps of deferred messages)."""
        return self._wanted["head"] + self._wanted["deferred"]

    def _room(self, why: str, by: Any) -> bool:
        """Room for one more wanted id of kind ``why`` on behalf of ``by`` (an announcer, a deferring publisher).

        Each kind has its own cap, and each announcer or publisher a share of it, so neither a peer
        announcing ids nobody can serve nor a publisher flooding messages that name ghosts crowds out
        the heads and chains of the others.
        """
        if self._wanted[why] >= MAX_UNWAITED:
            return False
        shares = len(self.config.peers) if why == "head" else max(len(t.publishers) for t in self.config.topics.values())
        return self._quota[(why, by)] < max(min(MAX_DEPS, MAX_UNWAITED // 2), MAX_UNWAITED // max(1, shares))

    def _count(self, why: str, by: Any, step: int) -> None:
        if why == "dep":
            return
        self._wanted[why] += step
        key = (why, by)
        self._quota[key] += step
        if self._quota[key] <= 0:
            del self._quota[key]

    def _promote(self, entry: Missing) -> None:
        """A buffered message waits for an id wanted for another reason: it is a dep now."""
        self._count(entry.why, entry.by, -1)
        entry.why, entry.by = "dep", ""
        self.service.note("missing", entry.topic, entry.hash, entry.view())

    def _forget(self, digest: bytes) -> Missing | None:
        """No longer wanted: out of the table, its counts and the share."""
        found = self.missing.pop(digest, None)
        if found is not None:
            self._count(found.why, found.by, -1)
            self.service.unnote("missing", found.topic, digest)
        return found

    def arrived(self, msg: TopicMsg, source: str) -> None:
        """The relay stored ``msg``: it is no longer missing."""
        found = self._forget(msg.hash)
        if found is None:
            return
        if found.tries:
            self.counts["fetched"] += 1
            hooks = self.service.hooks
            if hooks.fetched is not None:
                hooks.fetched(found.topic, msg.hash, source, self.clock() - found.since)

    def forget_epoch(self, topic: str, epoch: int) -> None:
        for digest in [d for d, m in self.missing.items() if m.topic == topic and m.epoch <= epoch]:
            self._forget(digest)

    # -- asking ----------------------------------------------------------------------------

    def _arm(self, now: float) -> None:
        """Wake at the earliest due entry (a scan: once per tick, not per want)."""
        self._arm_at(min((m.next_at for m in self.missing.values()), default=float("inf")), now)

    def _arm_at(self, due: float, now: float) -> None:
        if due == float("inf") or self._closed:
            return
        if self._timer is not None and self._due <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._due = due
        self._timer = self.scheduler.call_later(max(0.0, due - now), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._due = float("inf")
        if self._closed:
            return
        now = self.clock()
        waited = self._still_waited()
        asks: dict[tuple[str, str], list[Missing]] = {}
        for digest, entry in list(self.missing.items()):
            if digest not in waited and entry.why == "dep":
                self._forget(digest)  # what waited for it was rejected or abandoned
                continue
            if entry.next_at > now:
                continue
            entry.tries += 1
            entry.next_at = now + self._backoff(entry)
            if entry.sources:
                entry.asked = entry.sources[(entry.tries - 1) % len(entry.sources)]
                asks.setdefault((entry.asked, entry.topic), []).append(entry)
            else:
                self.counts["nowhere_to_ask"] += 1
            self.service.note("missing", entry.topic, digest, entry.view())
        for (estate, topic), entries in asks.items():
            for start in range(0, len(entries), MAX_DEPS):
                want = [e.hash for e in entries[start:start + MAX_DEPS]]
                self.counts["fetches"] += 1
                if not self.router.send(Route(FETCH_SHARE, "", estate, ""), {"topic": topic, "want": want}, src=FETCH_SHARE, tag=FETCH):
                    self.counts["fetch_unsent"] += 1
        self._arm(now)

    def _backoff(self, entry: Missing) -> float:
        """base * 2**(tries-1), capped, times a jitter in [0.75, 1.25) that a seed (the hash) decides."""
        spread = hashlib.blake2b(entry.hash + entry.tries.to_bytes(4, "big"), digest_size=2).digest()
        jitter = 0.75 + int.from_bytes(spread, "big") / 65536 / 2
        return min(self.config.fetch_max, self.config.fetch_base * 2 ** min(entry.tries - 1, 30)) * jitter

    def _still_waited(self) -> set[bytes]:
        out: set[bytes] = set()
        for sub in self.service.broker.subs.values():
            out.update(sub.mailbox.waiters)
        return out

    # -- answering -------------------------------------------------------------------------

    def _on_fetch(self, landing: Landing) -> None:
        data = landing.data
        if not isinstance(data, dict) or not isinstance(data.get("topic"), str) or not isinstance(data.get("want"), list):
            landing.refuse("causal.fetch carries {topic, want: [hash, ...]}", "bad_fetch")
        topic, want = data["topic"], data["want"]
        if topic not in self.config.topics:
            landing.refuse(f"this estate relays no topic {topic[:80]!r}", "unknown_topic")
        if len(want) > MAX_DEPS or not all(isinstance(h, bytes) and len(h) == 32 for h in want):
            landing.refuse(f"causal.fetch wants at most {MAX_DEPS} hashes of 32 bytes", "bad_fetch")
        self.counts["fetch_asked"] += 1
        seqs: dict[int, bytes] = {}
        none: list[bytes] = []
        for digest in dict.fromkeys(want):
            held = self.relay.index.get(digest)
            if held is None or held.topic != topic:
                none.append(digest)
            else:
                seqs[held.seq] = digest
        msgs: list[bytes] = []
        total = 0
        order = list(seqs)
        # read a few at a time and stop at the answer's budget: what is left is asked for again, and a
        # small fetch must not make this relay read (up to 64 x 80 KiB) rows it would not send
        for start in range(0, len(order), 8):
            if total >= HAVE_BYTES:
                break
            chunk = order[start:start + 8]
            wires = self.relay.storage.get(chunk)
            for seq in chunk:
                wire = wires.get(seq)
                if wire is None:
                    none.append(seqs[seq])
                elif not msgs or total + len(wire) <= HAVE_BYTES:
                    msgs.append(wire)
                    total += len(wire)
                else:
                    total = HAVE_BYTES
                    break
        self.counts["fetch_served"] += len(msgs)
        landing.reply({"topic": topic, "msgs": msgs, "none": none}, tag=HAVE)

    def _on_have(self, landing: Landing) -> None:
        data = landing.data
        if not isinstance(data, dict) or not isinstance(data.get("msgs"), list) or not isinstance(data.get("none"), list):
            landing.refuse("causal.have carries {topic, msgs: [wire, ...], none: [hash, ...]}", "bad_have")
        if len(data["msgs"]) > 4 * MAX_DEPS or len(data["none"]) > 4 * MAX_DEPS:
            landing.refuse("causal.have answers at most one fetch", "bad_have")
        source = landing.src.estate
        for wire in data["msgs"]:
            self.relay.accept(wire, source)
        now = self.clock()
        for digest in data["none"]:
            entry = self.missing.get(digest) if isinstance(digest, bytes) else None
            if entry is None or entry.asked != source:
                continue
            if entry.why == "head":  # a head is wanted only on its announcer's word: who says none is asked no more
                if source in entry.sources:  # a hash named twice in one answer
                    entry.sources.remove(source)
                if not entry.sources:
                    self.counts["heads_unavailable"] += 1
                    self._forget(digest)
                    continue
                entry.next_at = now
            elif entry.tries < len(entry.sources):
                entry.next_at = now  # not there: ask the next relay now rather than after the back-off
        if self.missing:
            self._arm_at(now, now)

    def _on_error(self, share: Any) -> None:
        while share.queue:
            share.queue.popleft()
            self.counts["fetch_refused"] += 1

    def close(self) -> None:
        """Stop fetching and answering; a service started again in this house takes over the tags."""
        self._closed = True
        self.intake.close()
        self.router.unhandle(FETCH, self._on_fetch)
        self.router.unhandle(HAVE, self._on_have)
        store = self.router.store
        for name in [FETCH_SHARE + ".error"] + [from_share(p) for p in self.config.peers]:
            share = store.get(name)
            if share is not None:
                share.watchers.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for timer in (self._retrying, self._settling):
            if timer is not None:
                timer.cancel()
        self._retrying = self._settling = None
