"""An estate's CAST settings: retention, limits, leases, and who may subscribe to what.

One object read from the layout's ``cast:`` section (docs/cast.md), so
the publisher, the subscriber and the cache agree on the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flowcast.cast.wire import MAX_LEASE, MAX_SUBS, WINDOW, WINDOW_BYTES, check_pattern, inside
from flowcast.errors import Error
from flowcast.routing import Refused

__all__ = ["CastConfig", "CastConfigError"]


class CastConfigError(ValueError, Error):
    """A ``cast:`` layout section that cannot be read; the message says which key."""


@dataclass(frozen=True)
class CastConfig:
    retention: float = 86400.0
    max_bytes: int = 1 << 30
    #: The longest lease the publisher grants (a subscriber may ask for less); at most wire.MAX_LEASE.
    lease: float = 60.0
    window: int = WINDOW
    window_bytes: int = WINDOW_BYTES
    max_subs: int = MAX_SUBS
    #: Seconds a publish from a house without the cache waits for the cache's answer before it
    #: is refused ``timeout`` (flowcast/cast/remote.py): over a few restarts of the cache's house.
    publish_timeout: float = 30.0
    #: Seconds without an answer before such a publish is first sent again (by id; then doubling).
    publish_resend: float = 2.0
    #: estate -> the patterns its subscriptions must stay inside.
    subscribers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> "CastConfig":
        """From ``cast: {retention, max_bytes, lease, window, subscribers: [{estate, patterns}]}``."""
        data = dict(data or {})
        subscribers: dict[str, tuple[str, ...]] = {}
        for i, entry in enumerate(data.pop("subscribers", None) or ()):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("estate"), str) or not isinstance(entry.get("patterns"), (list, tuple)):
                raise CastConfigError(f"cast.subscribers[{i}]: give {{estate: NAME, patterns: [PATTERN, ...]}}")
            try:
                patterns = tuple(check_pattern(p) for p in entry["patterns"])
            except Refused as error:
                raise CastConfigError(f"cast.subscribers[{i}]: {error.reason}") from None
            subscribers[entry["estate"]] = subscribers.get(entry["estate"], ()) + patterns
        known = {"retention", "max_bytes", "lease", "window", "window_bytes", "max_subs", "publish_timeout", "publish_resend"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise CastConfigError(f"cast: unknown key {str(unknown[0])[:40]!r} (known: subscribers, {', '.join(sorted(known))})")
        for key, value in data.items():
            if value.__class__ not in (int, float) or value <= 0:
                raise CastConfigError(f"cast.{key} must be a positive number, not {str(value)[:40]!r}")
        if data.get("lease", 0) > MAX_LEASE:
            raise CastConfigError(f"cast.lease is at most {MAX_LEASE:g} seconds (what cast.sub may ask), not {data['lease']!r}")
        config = cls(subscribers=subscribers, **data)
        if config.publish_resend >= config.publish_timeout:
            raise CastConfigError(f"cast.publish_resend ({config.publish_resend:g}) must be less than cast.publish_timeout ({config.publish_timeout:g})")
        return config

    def may_subscribe(self, estate: str, pattern: str) -> bool:
        """Only if every name ``pattern`` can match is inside a pattern granted to ``estate``."""
        return any(inside(pattern, allowed) for allowed in self.subscribers.get(estate, ()))
