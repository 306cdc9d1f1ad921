"""A router's state as plain data, for ``flowcast status``.

Kept apart from the router: what an operator reads changes more often
than how messages move, and none of it is on a message's path.
"""

from __future__ import annotations

from typing import Any

__all__ = ["snapshot", "JOIN_COUNTS"]

#: Road counts ``flowcast status`` shows per road: refused joins (and, of
#: those, a known name with another key), cookies answered under load, and
#: joins dropped while the keep's disk was behind.
JOIN_COUNTS = ("join_refused", "key_changed", "join_cookies", "bad_join", "bad_join_cookie", "keep_busy", "join_limited", "keep_full", "rotations")


def snapshot(router: Any) -> dict[str, Any]:
    """``router``'s estate, roads, holds, counts, busiest routes and last denials."""
    roads = {}
    for channel, road in router.roads.items():
        roads[channel] = {
            name: getattr(remote.presence, "value", str(remote.presence))
            for name, remote in getattr(road, "_by_name", {}).items()
        }
    top = sorted(router.routes.items(), key=lambda item: -item[1])[:50]
    return {
        "estate": router.estate,
        "yard": router.yard,
        "manor": router.manor,
        "yards": list(router.lane.yards) if router.lane is not None else [],
        "held": {f"{estate}/{channel}": n for (channel, estate), n in router._held.sizes().items()},
        "held_bytes": router._held.bytes,
        "roads": roads,
        "joins": {
            channel: {k: road.counts[k] for k in JOIN_COUNTS if road.counts.get(k)}
            for channel, road in router.roads.items()
            if hasattr(road, "counts")
        },
        "counts": dict(router.counts),
        "policy": dict(router.policy.counts),
        "routes": [[str(src), str(dst), n] for (src, dst), n in top],
        "denials": list(router.denials)[-20:],
    }
