"""A topic's trust root and an estate's causal settings (docs/causal.md, "Using it").

Why the keys come from configuration: predicate 1 ("the signature comes
from a valid publisher of this topic") needs a root of trust that no
message can change, or a publisher could sign its own admission.  So the
owner and the publishers of each topic are verify keys given by the
layout; only the owner opens epochs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from flowcast.causal.message import CausalError, check_topic

__all__ = ["CausalConfig", "TopicConfig", "check_key"]


def check_key(key: object) -> bytes:
    """A 32-byte Ed25519 verify key, from bytes or 64 hex digits."""
    if isinstance(key, str):
        try:
            key = bytes.fromhex(key)
        except ValueError:
            raise CausalError(f"a verify key is 64 hex digits, got {key[:80]!r}", "bad_key") from None
    if not isinstance(key, bytes) or len(key) != 32:
        raise CausalError("a verify key is 32 bytes (64 hex digits)", "bad_key")
    return key


@dataclass(frozen=True)
class TopicConfig:
    """Who may publish to a topic; the owner is a publisher too, and alone opens epochs."""

    name: str
    owner: bytes
    publishers: frozenset[bytes] = frozenset()

    def __post_init__(self) -> None:
        check_topic(self.name)
        object.__setattr__(self, "owner", check_key(self.owner))
        object.__setattr__(self, "publishers", frozenset(check_key(k) for k in self.publishers) | {self.owner})

    @classmethod
    def of(cls, name: str, owner: bytes | str, publishers: Iterable[bytes | str] = ()) -> "TopicConfig":
        return cls(name, check_key(owner), frozenset(check_key(k) for k in publishers))


@dataclass(frozen=True)
class CausalConfig:
    """What an estate's relay relays and how patient it is."""

    topics: Mapping[str, TopicConfig] = field(default_factory=dict)
    #: Remote estates whose relays this one subscribes to (with CAST) and fetches from.
    peers: tuple[str, ...] = ()
    #: Seconds an epoch stays open for fetching and delivery once the next has opened.
    grace: float = 300.0
    max_buffered: int = 10_000
    max_per_publisher: int = 1_000
    #: Fetch back-off: the first retry after ``fetch_base`` seconds, doubling to ``fetch_max``.
    fetch_base: float = 0.25
    fetch_max: float = 30.0
    #: Evidence (predicate-2 failures, equivocations) is kept this many seconds.
    evidence_for: float = 7 * 86400.0
    #: Evidence rows kept per publisher and kind in an epoch; more are counted, not written
    #: (a flood of signed junk must not turn into one fsync per message).
    evidence_cap: int = 100
    #: If set, a house holding a topic's owner key opens a new epoch this often (seconds).
    epoch_every: float | None = None
    #: Seconds between announcements of this relay's heads to its peers (None: never; docs/causal.md, "Heads").
    heads_every: float | None = 10.0
    #: Seconds a publish naming a dep by a hash this relay has not stored yet waits for it before it is
    #: refused ``unknown_dep`` (0: at once; flowcast/causal/depwait.py).  A few seconds: what the
    #: application got by CAST reaches its relay a road trip and an fsync later, or a fetch or two.
    dep_wait: float = 5.0
    #: History one publisher may hold in one epoch of a topic here: messages, and their wire bytes.  Past
    #: either, its messages of that epoch are refused ``epoch_full`` (counted, shown in status, logged once),
    #: until the owner opens the next epoch.  Without ``epoch_every`` epoch 0 never closes, so this is what
    #: bounds what one authorized publisher can make every relay hold (about 400 B of memory per message).
    epoch_max_messages: int = 100_000
    epoch_max_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        for name, topic in self.topics.items():
            if not isinstance(topic, TopicConfig) or topic.name != name:
                raise CausalError(f"topics maps each name to its TopicConfig, got {name!r}", "bad_config")
        if self.grace < 0 or self.max_buffered < 1 or self.max_per_publisher < 1 or not 0 < self.fetch_base <= self.fetch_max:
            raise CausalError("grace >= 0, caps >= 1 and 0 < fetch_base <= fetch_max", "bad_config")
        if self.epoch_every is not None and not self.epoch_every > 0:
            raise CausalError("epoch_every is a positive number of seconds", "bad_config")
        if self.epoch_max_messages < 1 or self.epoch_max_bytes < 1:
            raise CausalError("epoch_max_messages and epoch_max_bytes are at least 1", "bad_config")
        if not self.dep_wait >= 0:
            raise CausalError("dep_wait is a number of seconds >= 0", "bad_config")
        if self.heads_every is not None and not self.heads_every > 0:
            raise CausalError("heads_every is a positive number of seconds", "bad_config")
        object.__setattr__(self, "peers", tuple(self.peers))

    def topic(self, name: str) -> TopicConfig:
        found = self.topics.get(name)
        if found is None:
            raise CausalError(f"this estate relays no topic {name[:80]!r} (configured: {', '.join(sorted(self.topics)) or 'none'})", "unknown_topic")
        return found
