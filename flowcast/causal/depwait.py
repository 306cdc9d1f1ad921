"""Publishes that wait, a bounded time, for a dependency this relay has not stored yet.

A dep is named by its signed hash, so a publish can name only what this
relay holds: its signature comes from there.  An application often learns
of a message before its own relay has stored it -- it got it by CAST, or
from a peer's relay, a moment before the relay's own feed brings it -- and
refusing ``unknown_dep`` at once made every such application write a retry
loop with state in memory.  So the publish waits: when the relay stores
the last missing dep the message is signed and stored as if published then;
past ``wait`` seconds it is refused ``unknown_dep``, as it was at once before.

Bounded: at most ``MAX_WAITING`` publishes and ``MAX_WAITING_BYTES`` of
their content wait per relay; past either a publish that would wait is
refused ``unknown_dep`` at once, saying so.  Each waiting publish has one
timer (cancelled when it goes) and one entry per missing hash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flowcast.causal.message import CausalError, TopicMsg, TopicMsgID

__all__ = ["DepWait", "Waiting", "MAX_WAITING", "MAX_WAITING_BYTES"]

MAX_WAITING = 10_000
MAX_WAITING_BYTES = 64 << 20


class Waiting:
    """A publish waiting for its deps: a ticket like :class:`~flowcast.causal.service.Published`.

    ``done`` once it was published and is durable (``msg`` and ``seq`` then
    say what), or refused (``error``: ``unknown_dep`` past the wait, or
    whatever the publish itself was refused for).
    """

    __slots__ = ("topic", "content", "tags", "deps", "missing", "timer", "inner", "_error")

    def __init__(self, topic: str, content: bytes, tags: tuple[str, ...], deps: list[TopicMsgID | bytes], missing: set[bytes]) -> None:
        self.topic = topic
        self.content = content
        self.tags = tags
        self.deps = deps
        self.missing = missing
        self.timer: Any = None
        self.inner: Any = None  # the Published ticket once it went
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._error is not None or (self.inner is not None and self.inner.done)

    @property
    def error(self) -> BaseException | None:
        return self._error if self.inner is None else self.inner.error

    @property
    def msg(self) -> TopicMsg | None:
        return None if self.inner is None else self.inner.msg

    @property
    def seq(self) -> int:
        return 0 if self.inner is None else self.inner.seq


class DepWait:
    """The waiting publishes of one relay.

    ``held(topic, digest)`` is the id of a stored message of ``topic`` (None
    while it is not stored; CausalError if it never can be a dep here);
    ``publish(topic, content, tags, deps)`` publishes with resolved ids.
    """

    def __init__(self, scheduler: Any, held: Callable[[str, bytes], TopicMsgID | None],
                 publish: Callable[[str, bytes, tuple[str, ...], list[TopicMsgID]], Any], *,
                 limit: int = MAX_WAITING, limit_bytes: int = MAX_WAITING_BYTES) -> None:
        self.scheduler = scheduler
        self.held = held
        self._publish = publish
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.by_hash: dict[bytes, list[Waiting]] = {}
        self.waiting = 0
        self.bytes = 0
        self.counts = {"waited": 0, "went": 0, "timed_out": 0, "refused_full": 0}
        self._closed = False

    def add(self, topic: str, content: bytes, tags: Iterable[str], deps: list[TopicMsgID | bytes], wait: float) -> Any:
        """Publish now if every dep is held, else wait up to ``wait`` seconds for the missing ones.

        ``deps``: ids, or hashes to look up.  A hash held under another
        topic or epoch is refused at once (waiting cannot change it).
        """
        tags = tuple(tags)
        missing = {dep for dep in deps if isinstance(dep, bytes) and self.held(topic, dep) is None}
        if not missing:
            return self._publish(topic, content, tags, self._ids(topic, deps))
        first = next(iter(missing))
        if wait <= 0 or self._closed:
            raise _unknown(topic, first, "")
        if self.waiting >= self.limit or self.bytes + len(content) > self.limit_bytes:
            self.counts["refused_full"] += 1
            raise _unknown(topic, first, f" (and {self.waiting} publishes already wait for theirs, the most a relay holds)")
        entry = Waiting(topic, content, tags, list(deps), missing)
        for digest in missing:
            self.by_hash.setdefault(digest, []).append(entry)
        entry.timer = self.scheduler.call_later(wait, self._expire, entry, wait)
        self.waiting += 1
        self.bytes += len(content)
        self.counts["waited"] += 1
        return entry

    def stored(self, digest: bytes) -> None:
        """The relay stored ``digest``: whatever waited for it alone goes, on the next turn.

        Not from inside the relay's own callback: publishing stores into the
        relay, which is still telling everyone else of ``digest``.
        """
        entries = self.by_hash.pop(digest, None)
        if not entries:
            return
        ready = []
        for entry in entries:
            entry.missing.discard(digest)
            if not entry.missing:
                ready.append(entry)
        if ready:
            self.scheduler.call_later(0.0, self._go_all, ready)

    def close(self) -> None:
        """The relay closes: what still waits is refused ``closed``."""
        self._closed = True
        for entries in list(self.by_hash.values()):
            for entry in entries:
                if entry.inner is None and entry._error is None:
                    self._end(entry, CausalError("the relay closed while this publish waited for its deps", "closed"))
        self.by_hash.clear()

    # -- inside --------------------------------------------------------------------------

    def _go_all(self, entries: list[Waiting]) -> None:
        for entry in entries:
            if entry.inner is None and entry._error is None:  # not out of time, nor closed, meanwhile
                self._go(entry)

    def _go(self, entry: Waiting) -> None:
        content = entry.content
        self._release(entry)
        self.counts["went"] += 1
        try:
            entry.inner = self._publish(entry.topic, content, entry.tags, self._ids(entry.topic, entry.deps))
        except Exception as error:  # noqa: BLE001 - refused as a publish now would be (the epoch moved on, cross_epoch...)
            entry._error = error

    def _expire(self, entry: Waiting, wait: float) -> None:
        entry.timer = None
        if entry.inner is not None or entry._error is not None:
            return
        missing = sorted(entry.missing)
        for digest in missing:
            entries = self.by_hash.get(digest)
            if entries is not None:
                entries.remove(entry)
                if not entries:
                    del self.by_hash[digest]
        self.counts["timed_out"] += 1
        self._end(entry, _unknown(entry.topic, missing[0], f" after waiting {wait:g} s for it"))

    def _end(self, entry: Waiting, error: BaseException) -> None:
        self._release(entry)
        entry._error = error

    def _release(self, entry: Waiting) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        self.waiting -= 1
        self.bytes -= len(entry.content)
        entry.content = b""  # published or refused: the flow holds its item, nothing here needs it

    def _ids(self, topic: str, deps: list[TopicMsgID | bytes]) -> list[TopicMsgID]:
        out = []
        for dep in deps:
            if isinstance(dep, TopicMsgID):
                out.append(dep)
                continue
            found = self.held(topic, dep)
            if found is None:  # pragma: no cover - only called once every hash is held
                raise _unknown(topic, dep, "")
            out.append(found)
        return out


def _unknown(topic: str, digest: bytes, more: str) -> CausalError:
    return CausalError(f"this relay holds no message {digest.hex()[:16]}... of topic {topic!r} to depend on{more}", "unknown_dep")
