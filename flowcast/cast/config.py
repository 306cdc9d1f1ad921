"""An estate's CAST settings: retention, limits, leases, and who may subscribe to what.

One object read from the layout's ``cast:`` section (docs/cast.md), so
the publisher, the subscriber and the cache agree on the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flowcast.cast.wire import MAX_SUBS, WINDOW, WINDOW_BYTES, check_pattern, inside
from flowcast.errors import Error
from flowcast.routing import Refused

__all__ = ["CastConfig", "CastConfigError"]


class CastConfigError(ValueError, Error):
    """A ``cast:`` layout section that cannot be read; the message says which key."""


@dataclass(frozen=True)
class CastConfig:
    retention: float = 86400.0
    max_bytes: int = 1 << 30
    #: The longest lease the publisher grants (a subscriber may ask for less).
    lease: float = 60.0
    window: int = WINDOW
    window_bytes: int = WINDOW_BYTES
    max_subs: int = MAX_SUBS
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
        known = {"retention", "max_bytes", "lease", "window", "window_bytes", "max_subs"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise CastConfigError(f"cast: unknown key {str(unknown[0])[:40]!r} (known: subscribers, {', '.join(sorted(known))})")
        for key, value in data.items():
            if value.__class__ not in (int, float) or value <= 0:
                raise CastConfigError(f"cast.{key} must be a positive number, not {str(value)[:40]!r}")
        return cls(subscribers=subscribers, **data)

    def may_subscribe(self, estate: str, pattern: str) -> bool:
        """Only if every name ``pattern`` can match is inside a pattern granted to ``estate``."""
        return any(inside(pattern, allowed) for allowed in self.subscribers.get(estate, ()))
