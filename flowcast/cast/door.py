"""The manor's part in CAST when the cache runs in another house: the door to it.

A remote estate addresses its subscriptions to the estate (``cast@.abc``),
which is its manor: the manor runs the roads and checks every arrival
against the policy.  When the layout puts the cache in another house
(``cast: {house: cache}``), the manor has no publisher to hand them to, so
without this it took ``cast.sub`` for a plain write and refused the grant
the docs give (``{allow: subscribe, estate: xyz, share: cast}``).

The door declares CAST's subscription tags with the permission the
publisher registers them with (``subscribe``), so the manor admits them by
the same rule, and forwards the ``cast`` share to the cache's house, which
answers the remote by the usual way.  Nothing else changes for anyone: a
subscriber addresses the estate wherever its cache runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowcast.cast.publisher import SHARE, SUBSCRIBE
from flowcast.cast.wire import CURSOR, SUB, UNSUB

__all__ = ["open_door", "DOOR_TAGS"]

#: What a remote sends to the publisher, each needing ``subscribe``.
DOOR_TAGS = (SUB, UNSUB, CURSOR)


def open_door(router: Any, cache_yard: str) -> Callable[[], None]:
    """At the manor ``router``: admit CAST's subscription tags as ``subscribe`` and pass ``cast`` on to ``cache_yard``.

    Returns what closes the door again (the service calls it on close).
    """
    for tag in DOOR_TAGS:
        router.declare(tag, access=SUBSCRIBE)
    router.forward(SHARE, cache_yard)

    def close() -> None:
        router.unforward(SHARE)
        for tag in DOOR_TAGS:
            router.unhandle(tag)

    return close
