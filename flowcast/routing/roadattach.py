"""What attaching a road gives a router: its arrivals, its failures, its presence share, its allowance.

Apart from the router, which only keeps the road: each listener here is
one line of wiring plus what it must not let through (a flow's watcher
that raises, a policy the road asks before it decodes anything).
"""

from __future__ import annotations

from typing import Any

from flowcast.routing.allowance import RoadAllowance
from flowcast.routing.hold import release

__all__ = ["attach", "presence_share"]


def presence_share(channel: str) -> str:
    """The share whose fields are ``{estate: presence}`` for one road."""
    return f"flowcast.road.{channel}.presence"


def attach(router: Any, channel: str, road: Any) -> RoadAllowance:
    """Listen to ``road`` for ``router`` (channel ``channel``), and give the road the router's allowance."""
    road.hooks.add("message", lambda message: router._from_road(channel, road, message))
    road.hooks.add("done", router._done)
    presence = router.store.share(presence_share(channel))

    def on_presence(name: str, old: Any, new: Any) -> None:
        # Held messages go first: the presence share runs the flows' watchers,
        # and their bugs must not keep a joined estate's messages waiting.
        try:
            if (channel, name) in router._held:
                release(router, channel, name)
            presence.update({name: getattr(new, "value", str(new))})
        except Exception:  # noqa: BLE001 - see Router._broke
            router._broke("presence", name)

    road.hooks.add("presence", on_presence)
    allowance = RoadAllowance(lambda: router.policy, channel, router._clock, router.counts, router.denials)
    road.set_allowance(allowance)
    return allowance
