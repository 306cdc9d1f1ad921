"""The relay's index of stored messages, packed: about 120 bytes a message instead of 300.

Why packed: the relay remembers every message of the open epochs, and an
authorized publisher decides how many there are (up to its epoch budget),
so what one costs here is what a flood costs every relay.  A record is
one bytes object -- seq, epoch, and small numbers standing for the topic,
publisher and source (each name is kept once) -- and a keyed 8-byte
fingerprint of the signature instead of its 64 bytes.

Why a fingerprint is enough to compare: a dep naming a held message with
another signature must verify; with the fingerprint's key unknown outside
this process, a forged signature matches the fingerprint with odds of one
in 2**64, so a mismatch costs one verify and a match none.  The whole
signature, needed to name a message as a dep (a publish's frontier, the
heads announced to peers), is kept for the newest ``RECENT`` messages --
the ones new messages name -- and read back from storage for the others.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator

__all__ = ["Held", "HeldIndex", "RECENT"]

#: Whole signatures kept for the newest stored messages (what a publish names); older ones are read back.
RECENT = 256

_ROW = struct.Struct("<QQIIIB8s")
_KEY = os.urandom(16)


def fingerprint(hsig: bytes) -> bytes:
    return hashlib.blake2b(hsig, digest_size=8, key=_KEY).digest()


class Held:
    """What the relay remembers of one stored message (a view made on asking; changing it changes nothing)."""

    __slots__ = ("hash", "topic", "epoch", "publisher", "seq", "source", "unsure", "mark", "_index")

    def __init__(self, hash: bytes, topic: str, epoch: int, publisher: bytes, seq: int, source: str, unsure: bool,
                 mark: bytes, index: "HeldIndex") -> None:
        self.hash = hash
        self.topic = topic
        self.epoch = epoch
        self.publisher = publisher
        self.seq = seq
        self.source = source
        #: some dep was not held here when it was accepted, so its named signature was not compared then
        self.unsure = unsure
        self.mark = mark
        self._index = index

    @property
    def hsig(self) -> bytes:
        """The publisher's signature of the hash (kept for recent messages, else read back from storage)."""
        return self._index.hsig(self.hash, self.seq)

    def signed_by(self, publisher: bytes, hsig: bytes) -> bool:
        """True if (publisher, hsig) is how this message was signed (False: verify it to know)."""
        if publisher != self.publisher:
            return False
        recent = self._index.recent.get(self.hash)
        return hsig == recent if recent is not None else fingerprint(hsig) == self.mark


class HeldIndex:
    """hash -> :class:`Held`, for the messages stored in the open epochs; ``read(seq)`` gives a stored hsig."""

    def __init__(self, read: Callable[[int], bytes | None]) -> None:
        self._rows: dict[bytes, bytes] = {}
        self._read = read
        self._names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self._keys: list[bytes] = []
        self._key_ids: dict[bytes, int] = {}
        #: hash -> hsig of the newest stored messages
        self.recent: OrderedDict[bytes, bytes] = OrderedDict()

    def put(self, digest: bytes, topic: str, epoch: int, publisher: bytes, hsig: bytes, seq: int, source: str,
            unsure: bool = True) -> None:
        self._rows[digest] = _ROW.pack(seq, epoch, self._name(topic), self._key(publisher), self._name(source),
                                       1 if unsure else 0, fingerprint(hsig))
        recent = self.recent
        recent[digest] = hsig
        if len(recent) > RECENT:
            recent.popitem(last=False)

    def get(self, digest: bytes) -> Held | None:
        row = self._rows.get(digest)
        if row is None:
            return None
        seq, epoch, topic, publisher, source, unsure, mark = _ROW.unpack(row)
        return Held(digest, self._names[topic], epoch, self._keys[publisher], seq, self._names[source], bool(unsure),
                    mark, self)

    def __getitem__(self, digest: bytes) -> Held:
        found = self.get(digest)
        if found is None:
            raise KeyError(digest)
        return found

    def __contains__(self, digest: object) -> bool:
        return digest in self._rows

    def __delitem__(self, digest: bytes) -> None:
        del self._rows[digest]
        self.recent.pop(digest, None)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._rows)

    def values(self) -> Iterator[Held]:
        for digest in list(self._rows):
            found = self.get(digest)
            if found is not None:
                yield found

    def items(self) -> Iterator[tuple[bytes, Held]]:
        for held in self.values():
            yield held.hash, held

    def hsig(self, digest: bytes, seq: int) -> bytes:
        recent = self.recent.get(digest)
        if recent is not None:
            return recent
        found = self._read(seq)
        return found if found is not None else b""

    def _name(self, name: str) -> int:
        found = self._name_ids.get(name)
        if found is None:
            found = self._name_ids[name] = len(self._names)
            self._names.append(name)
        return found

    def _key(self, key: bytes) -> int:
        found = self._key_ids.get(key)
        if found is None:
            found = self._key_ids[key] = len(self._keys)
            self._keys.append(key)
        return found
