"""Give a house of an estate its CAST service, as the layout's ``cast:`` section says.

Every house of an estate with the section gets a ``house.cast``: the one
named by ``cast.house`` (the manor by default) opens the estate's cache
and serves subscriptions, and every house keeps an inbox of its own so a
flow anywhere in the estate can subscribe.  A cache that is present but
unreadable stops the house from starting (``CacheCorrupt``): replacing it
with an empty one would silently lose every acknowledged message.
"""

from __future__ import annotations

from typing import Any

from flowcast.cast import Cache, CastService
from flowcast.house.layoutcast import CastSpec

__all__ = ["wire_cast"]


def wire_cast(house: Any, spec: CastSpec, estate: str, yard: str) -> CastService:
    """Open the cache when ``yard`` runs it, build the service, put it in ``house.cast``."""
    spec.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    cache = None
    if yard == spec.house:
        config = spec.config
        cache = Cache.open(spec.cache_path, estate=estate, clock=house.scheduler.clock, retention=config.retention,
                           max_bytes=config.max_bytes, scheduler=house.scheduler)
        house.on_close(cache.close)  # closers run newest first: the service stops before its cache
    service = CastService(house.router, cache=cache, config=spec.config, inbox=spec.inbox_path(yard), cache_yard=spec.house)
    return service.attach(house)
