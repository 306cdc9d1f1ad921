"""flowcast.cast: cached, asynchronous pub/sub between estates (docs/cast.md).

    cast = CastService(router, cache=cache, config=CastConfig.from_mapping(layout.get("cast")))
    ticket = cast.publish("abc/messages/alice/1", b"hello")
    sub = CastService(router, inbox=path).subscribe("abc/messages/**", into="inbox")
"""

from flowcast.cast.config import CastConfig, CastConfigError
from flowcast.cast.inbox import InboxCorrupt
from flowcast.cast.service import CastService
from flowcast.cast.subscriber import Subscription

__all__ = ["CastConfig", "CastConfigError", "CastService", "InboxCorrupt", "Subscription"]
