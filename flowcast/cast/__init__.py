"""flowcast.cast: cached, asynchronous pub/sub between estates (docs/cast.md).

The storage half: ids, names and patterns, and the durable cache; the
protocol half: the publisher and subscriber sides and the service a house
holds in its ``cast`` slot::

    cast = CastService(router, cache=cache, config=CastConfig.from_mapping(layout.get("cast")))
    ticket = cast.publish("abc/messages/alice/1", b"hello")
    sub = CastService(router, inbox=path).subscribe("abc/messages/**", into="inbox")

and end to end between users of two estates (docs/cast.md, "End to end")::

    alice = EndToEnd(cast, estate_dir).user("alice")
    alice.request("bob@xyz"); alice.send("bob@xyz", b"sealed for bob only")
"""

from flowcast.cast.cache import Cache, Read, Stored, Ticket
from flowcast.cast.cacheerrors import CacheCorrupt, CacheError, CacheFull, CacheLost
from flowcast.cast.config import CastConfig, CastConfigError
from flowcast.cast.contacts import ContactsCorrupt
from flowcast.cast.e2e import ContactError, EndToEnd, User
from flowcast.cast.identity import IdentityError, UserKeys
from flowcast.cast.ids import IdMaker, new_id
from flowcast.cast.inbox import InboxCorrupt
from flowcast.cast.names import CastNameError, Pattern, allowed, check_name, check_pattern, inside, matches, split_takes
from flowcast.cast.service import CastService
from flowcast.cast.subscriber import Subscription

__all__ = [
    "Cache",
    "CacheCorrupt",
    "CacheError",
    "CacheFull",
    "CacheLost",
    "CastConfig",
    "CastConfigError",
    "CastNameError",
    "CastService",
    "ContactError",
    "ContactsCorrupt",
    "EndToEnd",
    "IdMaker",
    "IdentityError",
    "InboxCorrupt",
    "Pattern",
    "Read",
    "Stored",
    "Subscription",
    "Ticket",
    "User",
    "UserKeys",
    "allowed",
    "check_name",
    "check_pattern",
    "inside",
    "matches",
    "new_id",
    "split_takes",
]
