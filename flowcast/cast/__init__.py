"""flowcast.cast: cached, asynchronous pub/sub between estates (docs/cast.md).

The storage half lives here: ids, names and patterns, and the durable cache.
"""

from flowcast.cast.cache import Cache, Read, Stored, Ticket
from flowcast.cast.cacheerrors import CacheCorrupt, CacheError, CacheFull
from flowcast.cast.ids import IdMaker, new_id
from flowcast.cast.names import CastNameError, Pattern, allowed, check_name, check_pattern, inside, matches, split_takes

__all__ = [
    "Cache",
    "CacheCorrupt",
    "CacheError",
    "CacheFull",
    "CastNameError",
    "IdMaker",
    "Pattern",
    "Read",
    "Stored",
    "Ticket",
    "allowed",
    "check_name",
    "check_pattern",
    "inside",
    "matches",
    "new_id",
    "split_takes",
]
