"""Answering ``read``: a share's fields, within what one read may return and one estate may ask for.

A read is a few bytes asking for many: before these bounds, five reads of an
8 MiB share sent 40 MB back, and a read every 20 ms from one accepted estate
left the house deaf to everyone else for over a minute.  So, as QUIC and
WireGuard treat a peer that is accepted but not trusted with the victim's
CPU and bandwidth:

* A share's fields are packed once per change (:meth:`Share.encoded
  <flowcast.store.share.Share.encoded>`), not once per read.
* One answer is at most ``max_reply`` bytes packed; a bigger share is
  refused, ``read_too_large``, with a reason that says both sizes, and
  nothing of it is sent.
* Each other estate has a token bucket of reads a second and one of reply
  bytes a second (a second's worth of burst; the bytes bucket holds at
  least one ``max_reply``).  A read over either is refused,
  ``read_limited``.  Nothing waits: a queue of refused reads would be the
  unbounded thing again.  This estate's own yards are not limited: they
  are its own processes.
* A refusal is answered like any other, ``error`` to the reader's share,
  but at most ``REFUSALS_ANSWERED`` a second per estate; past that it is
  counted and noted, and the reader hears nothing more
  (``errors_withheld``): an answer to every read of a flood would make
  the refusals the flood's amplifier.

What a router counts: ``reads`` and ``read_bytes`` answered;
``read_too_large``, ``read_limited`` and ``errors_withheld`` refused;
``readers_evicted`` when more than ``MAX_READERS`` estates have buckets
(the oldest bucket goes; a returning estate starts with a full one).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Protocol

import msgpack

from flowcast.routing.handlers import Refused
from flowcast.runtime.tokenbucket import TokenBucket
from flowcast.store.share import QueueShare

if TYPE_CHECKING:  # pragma: no cover
    from flowcast.routing.handlers import Landing

__all__ = [
    "ReadLimits", "Reads", "configure_reads", "MAX_REPLY", "READ_BYTES_PER_SECOND", "READS_PER_SECOND",
    "REFUSALS_ANSWERED", "MAX_READERS",
]

#: Bytes one read may return at most (the share's fields, packed).
MAX_REPLY = 1 << 20
#: Reply bytes a second one other estate may draw by reads.
READ_BYTES_PER_SECOND = 4 << 20
#: Reads a second one other estate may make.
READS_PER_SECOND = 200
#: Refusals of reads answered a second per estate; the rest are counted only.
REFUSALS_ANSWERED = 10.0
#: Estates with read buckets at most.
MAX_READERS = 1024


@dataclass(frozen=True)
class ReadLimits:
    """What reads may cost a house: per read (``max_reply``) and per other estate (the two rates)."""

    max_reply: int = MAX_REPLY
    bytes_per_second: int = READ_BYTES_PER_SECOND
    reads_per_second: int = READS_PER_SECOND

    def __post_init__(self) -> None:
        for name in ("max_reply", "bytes_per_second", "reads_per_second"):
            value = getattr(self, name)
            if value.__class__ is not int or value < 1:
                raise ValueError(f"read limit {name} is a whole number >= 1, not {value!r}")


class _Clocked(Protocol):
    """The part of a router the read handler uses besides a landing's ``reply``."""

    estate: str
    counts: MutableMapping[str, int]

    def now(self) -> float: ...


class _Handles(Protocol):
    """A router as configure_reads uses it: its tag handlers."""

    def unhandle(self, tag: str, handler: Callable[[Landing], None] | None = None) -> bool: ...

    def handle(self, tag: str, handler: Callable[[Landing], None], *, access: str = "write") -> None: ...


class _Reader:
    """One other estate's buckets."""

    __slots__ = ("reads", "bytes", "refusals")

    def __init__(self, limits: ReadLimits, now: float) -> None:
        self.reads = TokenBucket(limits.reads_per_second, at=now)
        self.bytes = TokenBucket(limits.bytes_per_second, max(limits.bytes_per_second, limits.max_reply), at=now)
        self.refusals = TokenBucket(REFUSALS_ANSWERED, at=now)


class Reads:
    """The ``read`` handler of one router, with its limits and the buckets of the estates that read."""

    def __init__(self, limits: ReadLimits | None = None) -> None:
        self.limits = limits if limits is not None else ReadLimits()
        self._readers: dict[str, _Reader] = {}
        self._pack = msgpack.Packer(use_bin_type=True).pack  # one per house: a house is one thread

    def answer(self, landing: Landing) -> None:
        """Answer a read with the share's fields, tag ``value``; Refused when it may not be."""
        share = landing.share
        name = landing.dst.share
        if isinstance(share, QueueShare):
            raise Refused(f"share {name!r} is a queue and cannot be read", "unreadable")
        router: _Clocked = landing.router
        estate = landing.src.estate
        reader = None if estate == router.estate else self._reader(router, estate)
        limits = self.limits
        if reader is not None and not reader.reads.take(router.now()):
            self._limited(reader, router, f"estate {estate!r} reads more than {limits.reads_per_second} shares a second")
        size, packed = share.encoded(self._pack, limits.max_reply)
        if packed is None:
            refused = Refused(
                f"share {name!r} is {size} bytes packed, more than the {limits.max_reply} bytes one read may return",
                "read_too_large",
                "raise the estate layout's shares: read_max_bytes, or split the share",
            )
            if reader is not None and not reader.refusals.take(router.now()):
                refused.quiet = True
            raise refused
        if reader is not None and not reader.bytes.take(router.now(), size):
            self._limited(reader, router, f"estate {estate!r} reads more than {limits.bytes_per_second} bytes a second")
        router.counts["reads"] += 1
        router.counts["read_bytes"] += size
        landing.reply(share.fields(), packed=packed)

    def _reader(self, router: _Clocked, estate: str) -> _Reader:
        reader = self._readers.get(estate)
        if reader is None:
            readers = self._readers
            if len(readers) >= MAX_READERS:
                del readers[next(iter(readers))]
                router.counts["readers_evicted"] += 1
            reader = readers[estate] = _Reader(self.limits, router.now())
        return reader

    @staticmethod
    def _limited(reader: _Reader, router: _Clocked, reason: str) -> None:
        refused = Refused(f"{reason}: refused, ask again later", "read_limited")
        if not reader.refusals.take(router.now()):
            refused.quiet = True
        raise refused


def configure_reads(router: _Handles, limits: ReadLimits) -> Reads:
    """Give ``router`` a read handler with ``limits`` in place of the one it has (a layout's ``shares:``)."""
    reads = Reads(limits)
    router.unhandle("read")
    router.handle("read", reads.answer, access="read")
    return reads
