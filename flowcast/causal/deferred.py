"""Messages a mailbox deferred over a buffer cap, indexed by the one dep each waits for.

Why by dep: a deferred message is only a storage seq here (Local Storage
has its bytes), and the question after each delivery is "which of them
may go now?".  Remembering per publisher only the lowest deferred seq
made every delivery re-read everything that publisher deferred (a flood
of messages naming ghosts cost thousands of re-offers per honest
delivery).  Each deferred message waits here under exactly one of its
deps not yet delivered; a delivery wakes only the messages waiting under
its own hash, and a woken message offered again is delivered, buffered,
or deferred again under its next missing dep.  So a message is offered
again at most once per dep it names, plus once when its publisher gets
room, and what an honest delivery costs does not depend on how many
messages others deferred.

Why also by publisher, oldest first: when buffer room comes back the
oldest deferred messages of each publisher with room are offered first,
round the publishers in turn, so no publisher's backlog takes the room of
another's.

A message taken out by one path stays listed under its dep until that
dep is delivered or the lists are compacted (when the dead entries
outnumber the live ones), so taking one costs O(1).
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["Deferred", "Parked"]


class Parked:
    """One deferred message: where it is stored, and the dep it waits for here."""

    __slots__ = ("hash", "publisher", "epoch", "seq", "on", "live")

    def __init__(self, hash: bytes, publisher: bytes, epoch: int, seq: int, on: bytes) -> None:
        self.hash = hash
        self.publisher = publisher
        self.epoch = epoch
        self.seq = seq
        self.on = on
        self.live = True

    def __repr__(self) -> str:
        return f"Parked({self.hash[:6].hex()}, seq={self.seq}, on={self.on[:6].hex()})"


class Deferred:
    """The deferred messages of one mailbox; ``len`` is how many are deferred now."""

    def __init__(self) -> None:
        #: publisher -> its deferred messages by seq, oldest deferred first
        self.by_publisher: dict[bytes, dict[int, Parked]] = {}
        #: dep hash -> the deferred messages waiting here for it (one Parked, or a list of them)
        self.on: dict[bytes, Parked | list[Parked]] = {}
        #: taken out while still listed under their dep (compacted when they outnumber the live ones)
        self.dead = 0
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __contains__(self, hash: bytes) -> bool:  # for tests and tools: a scan
        return any(p.hash == hash for p in self)

    def __iter__(self) -> Iterator[Parked]:
        for entries in self.by_publisher.values():
            yield from entries.values()

    def park(self, hash: bytes, publisher: bytes, epoch: int, seq: int, on: bytes) -> bool:
        """Defer a message under ``on`` (a dep it waits for); False if it is deferred already."""
        mine = self.by_publisher.get(publisher)
        if mine is None:
            mine = self.by_publisher[publisher] = {}
        elif seq in mine:
            return False
        entry = Parked(hash, publisher, epoch, seq, on)
        mine[seq] = entry
        found = self.on.get(on)
        if found is None:
            self.on[on] = entry
        elif isinstance(found, list):
            found.append(entry)
        else:
            self.on[on] = [found, entry]
        self.count += 1
        return True

    def wake(self, dep: bytes) -> list[Parked]:
        """``dep`` was delivered (or rejected): the messages deferred under it, taken out, to offer again."""
        found = self.on.pop(dep, None)
        if found is None:
            return []
        entries = found if isinstance(found, list) else [found]
        out = []
        for entry in entries:
            if entry.live:
                self._take(entry)
                out.append(entry)
            else:
                self.dead -= 1
        return out

    def oldest(self, publisher: bytes, most: int) -> list[Parked]:
        """Take out up to ``most`` of ``publisher``'s oldest deferred messages (there is room for them)."""
        mine = self.by_publisher.get(publisher)
        out: list[Parked] = []
        if not mine or most <= 0:
            return out
        for entry in list(mine.values())[:most] if most < len(mine) else list(mine.values()):
            self._take(entry)
            self.dead += 1  # still listed under its dep
            out.append(entry)
        self._compact()
        return out

    def drop_epoch(self, epoch: int) -> list[Parked]:
        """Forget the deferred messages of ``epoch`` (it closed): returned, to be reported abandoned."""
        out = [entry for entry in self if entry.epoch == epoch]
        for entry in out:
            self._take(entry)
            self.dead += 1
        self._compact(force=bool(out))
        return out

    def _take(self, entry: Parked) -> None:
        entry.live = False
        mine = self.by_publisher[entry.publisher]
        del mine[entry.seq]
        if not mine:
            del self.by_publisher[entry.publisher]
        self.count -= 1

    def _compact(self, force: bool = False) -> None:
        """Drop the dead entries from the dep lists once they are as many as the live ones (amortised O(1))."""
        if not force and self.dead <= self.count + 64:
            return
        kept: dict[bytes, Parked | list[Parked]] = {}
        for dep, found in self.on.items():
            if isinstance(found, list):
                live = [e for e in found if e.live]
                if len(live) > 1:
                    kept[dep] = live
                elif live:
                    kept[dep] = live[0]
            elif found.live:
                kept[dep] = found
        self.on = kept
        self.dead = 0
