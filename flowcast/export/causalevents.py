"""The causal layer's mailbox and relay events as export rows (docs/export.md "Causal events").

What an operator asks of causal delivery is how long messages wait for
their dependencies, whose messages wait, and what never got delivered and
why.  The mailbox knows the first (``Ready.lag``: it stamped the message
when it buffered it), so it is recorded as it is, not rebuilt later from
two rows; the rest -- a rejection's reason, the deps an abandoned message
still lacked, an equivocation's two hashes, how long a fetched dep was
missing -- is recorded at the end that saw it, with the topic and the
publisher's key on every row so the Spark ``causal`` job can group by
them without a join.

Like CAST recording this costs nothing without a recorder: the listeners
go on the service's hooks (:data:`flowcast.causal.hooks.HOOKS`) and come off
on :meth:`CausalRecorder.detach`.  Only hashes, keys and counts are
recorded, never a message's content.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["CausalRecorder"]


def _hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


class CausalRecorder:
    """The listeners that record one CausalService's events into ``sink`` (a Recorder's ``causal``)."""

    def __init__(self, service: Any, sink: Any) -> None:
        self.service = service
        self.sink = sink
        self._installed: list[tuple[str, Any]] = []
        hooks = service.hooks
        for name, listener in (("buffered", self.buffered), ("delivered", self.delivered), ("rejected", self.rejected),
                               ("abandoned", self.abandoned), ("equivocation", self.equivocation),
                               ("fetched", self.fetched)):
            hooks.add(name, listener)
            self._installed.append((name, listener))

    def detach(self) -> None:
        hooks = self.service.hooks
        for name, listener in self._installed:
            hooks.discard(name, listener)
        self._installed.clear()

    # -- per subscription (the local broker's mailboxes) ---------------------------

    def buffered(self, sub: Any, entry: Any) -> None:
        """Held back: ``count`` is how many of its deps were not delivered yet."""
        self.sink.causal("causal-buffered", entry.hash.hex(), sub.topic, entry.publisher.hex(), epoch=entry.epoch,
                         seq=entry.seq, count=entry.waiting, sub=sub.name, share=sub.into)

    def delivered(self, sub: Any, ready: Any) -> None:
        """Handed to the subscription's queue share; ``lag`` is the seconds it was buffered (0: at once)."""
        self.sink.causal("causal-delivered", ready.hash.hex(), sub.topic, ready.publisher.hex(), epoch=ready.epoch,
                         seq=ready.seq, lag=ready.lag, sub=sub.name, share=sub.into)

    def rejected(self, sub: Any, topic: str, hash: bytes, publisher: bytes | None, reason: str) -> None:
        """Predicate 2, a bad dep, or a dep that was rejected; ``sub`` None: the relay's own verdict."""
        self.sink.causal("causal-rejected", hash.hex(), topic, _hex(publisher),
                         sub=None if sub is None else sub.name, share=None if sub is None else sub.into,
                         detail=str(reason))

    def abandoned(self, sub: Any, entry: Any, missing: Iterable[bytes]) -> None:
        """Its epoch closed while it waited; ``detail`` lists the deps it still lacked (at most 64)."""
        missing = [m.hex() for m in missing]
        self.sink.causal("causal-abandoned", entry.hash.hex(), sub.topic, entry.publisher.hex(), epoch=entry.epoch,
                         seq=entry.seq, count=len(missing), sub=sub.name, share=sub.into,
                         detail=",".join(missing) or None)

    # -- per relay -----------------------------------------------------------------

    def equivocation(self, topic: str, publisher: bytes, first: bytes, second: bytes) -> None:
        """``msg_id`` is the second message, ``detail`` the first: both are kept as evidence."""
        self.sink.causal("causal-equivocation", second.hex(), topic, publisher.hex(), detail=first.hex())

    def fetched(self, topic: str, hash: bytes, source: str, waited: float) -> None:
        """A missing dep arrived by fetch from ``source``, ``waited`` seconds after it was first missed."""
        self.sink.causal("causal-fetched", hash.hex(), topic, None, latency=waited, remote=source or None)
