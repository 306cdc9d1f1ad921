"""Heads exchange: relays tell their peers the newest messages they hold, so a message nothing names is not lost.

Why it is needed: fetching is driven by dependencies, so a message that no
later message names (the newest of a conversation) is fetched by nobody.
A relay misses one when its CAST stream from a peer had a gap (the peer's
cache expired it), when its own disk refused it, or when it follows no
peer at all; without this exchange it would never know.  Every
``heads_every`` seconds a relay sends each peer, per topic and open epoch,
the signed ids of the messages it holds that nothing it holds names yet
(at most 64, the newest); a receiver that does not hold one verifies its
signature and fetches it like a missing dependency -- and whatever *that*
message names is then fetched because something waits for it.

Why unreliable datagrams: an announcement replaces the one before it, so a
lost one costs nothing but a period, and a peer that is down collects no
backlog of stale ones.  An announcement whose heads did not change since
the last one to that peer is not sent, except every ``REFRESH`` periods (a
peer may have restarted and forgotten).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from flowcast.causal.message import MAX_DEPS
from flowcast.routing import Landing, Route

__all__ = ["HEADS", "HeadsExchange", "REFRESH"]

HEADS = "causal.heads"
#: Unchanged heads are announced again after this many periods.
REFRESH = 6


class HeadsExchange:
    """Announce this relay's heads to its peers on a period; fetch the heads they announce that it lacks."""

    def __init__(self, service: Any, sync: Any, share: str, access: str) -> None:
        self.service = service
        self.sync = sync
        self.relay = service.relay
        self.config = service.config
        self.router = service.router
        self.scheduler = self.router.scheduler
        self.share = share
        self.counts: Counter[str] = Counter()
        #: (peer, topic, epoch) -> (digest of the heads last sent, periods since sent)
        self._sent: dict[tuple[str, str, int], tuple[bytes, int]] = {}
        self._timer: Any = None
        self._closed = False
        self.router.handle(HEADS, self._on_heads, access=access)
        if self.config.heads_every is not None and self.config.peers:
            self._timer = self.scheduler.call_later(self.config.heads_every, self._tick)

    # -- announcing ------------------------------------------------------------------

    def _tick(self) -> None:
        self._timer = None
        if self._closed:
            return
        self.announce()
        self._timer = self.scheduler.call_later(self.config.heads_every, self._tick)

    def heads(self, topic: str, epoch: int) -> list[list[bytes]]:
        """[publisher, hash, hsig] of the newest heads of ``topic`` in ``epoch`` held here (stored)."""
        index = self.relay.index
        out = []
        for digest in reversed(list(self.relay.heads.get((topic, epoch), ()))):
            held = index.get(digest)
            if held is not None:
                out.append([held.publisher, digest, held.hsig])
                if len(out) == MAX_DEPS:
                    break
        return out

    def announce(self) -> int:
        """Send every peer the heads that changed (or are due again); how many announcements were sent."""
        sent = 0
        for topic in self.config.topics:
            current = self.relay.current.get(topic, 0)
            for epoch in (current - 1, current):
                if epoch < 0 or not self.relay.is_open(topic, epoch):
                    continue
                heads = self.heads(topic, epoch)
                if not heads:
                    continue
                digest = hashlib.blake2b(b"".join(h[1] for h in heads), digest_size=16).digest()
                for peer in self.config.peers:
                    key = (peer, topic, epoch)
                    last, age = self._sent.get(key, (b"", REFRESH))
                    if last == digest and age + 1 < REFRESH:
                        self._sent[key] = (last, age + 1)
                        continue
                    self._sent[key] = (digest, 0)
                    data = {"topic": topic, "epoch": epoch, "heads": heads}
                    if self.router.send(Route(self.share, "", peer, ""), data, src=self.share, tag=HEADS, reliable=False):
                        sent += 1
                        self.counts["heads_sent"] += 1
                    else:
                        self.counts["heads_unsent"] += 1
        for key in [k for k in self._sent if not self.relay.is_open(k[1], k[2])]:
            del self._sent[key]
        return sent

    # -- hearing -----------------------------------------------------------------------

    def _on_heads(self, landing: Landing) -> None:
        data = landing.data
        if not (isinstance(data, dict) and isinstance(data.get("topic"), str) and type(data.get("epoch")) is int
                and isinstance(data.get("heads"), list) and len(data["heads"]) <= MAX_DEPS):
            self.counts["bad_heads"] += 1
            landing.refuse(f"causal.heads carries {{topic, epoch, heads: [[publisher, hash, hsig], ...]}} (at most {MAX_DEPS})", "bad_heads")
        topic, epoch = data["topic"], data["epoch"]
        if topic not in self.config.topics:
            self.counts["bad_heads"] += 1
            landing.refuse(f"this estate relays no topic {topic[:80]!r}", "unknown_topic")
        self.counts["heads_heard"] += 1
        source = landing.src.estate
        for head in data["heads"]:
            if not (isinstance(head, list) and len(head) == 3 and all(isinstance(p, bytes) for p in head)
                    and len(head[0]) == 32 and len(head[1]) == 32 and len(head[2]) == 64):
                self.counts["bad_heads"] += 1
                continue
            outcome = self.sync.want_head(topic, epoch, head[0], head[1], head[2], source)
            if outcome:
                self.counts[f"heads_{outcome}"] += 1

    def close(self) -> None:
        self._closed = True
        self.router.unhandle(HEADS, self._on_heads)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
