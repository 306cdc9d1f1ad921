"""CastService: CAST as a house sees it, in the house's ``cast`` slot.

One object per house, whichever half it runs: the house that holds the
cache publishes into it directly and serves subscriptions (Publisher); any
house may subscribe (Subscriber); a house without the cache publishes by
sending ``cast.pub`` down the lane to the one that has it, and its ticket
completes when the ``cast.puback`` (or the error) comes back, or fails
``timeout`` when nothing does in time (flowcast/cast/remote.py resends by
id meanwhile) -- so a flow calls the same ``publish`` wherever it runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from flowcast.cast.config import CastConfig
from flowcast.cast.door import open_door
from flowcast.cast.ids import new_id
from flowcast.cast.outbox import Outbox
from flowcast.cast.publisher import SHARE, Publisher
from flowcast.cast.remote import RemotePublishes, RemoteTicket
from flowcast.cast.subscriber import Subscriber, Subscription
from flowcast.cast.wire import PUB, PUBACK, read_pub, read_puback
from flowcast.routing import Landing, Route

__all__ = ["CastService", "RemoteTicket", "new_id"]

_PUB_SHARE = "cast.publish"
#: Refusals from the cache's house that name a publish and still pass: the cache was closing (its house
#: stopping, to be started again), so the publish goes again rather than to the flow as refused.
_PASSING = ("closed",)


class CastService:
    """CAST for the house of ``router``: ``cache`` if this house runs it, ``inbox`` if it subscribes.

    ``cache_yard`` names the house with the cache (the manor by default),
    where a house without one sends its publishes; a manor without the
    cache opens the door to it for remote subscribers (flowcast/cast/door.py).
    """

    def __init__(self, router: Any, *, cache: Any = None, config: CastConfig | None = None,
                 inbox: str | os.PathLike[str] | None = None, cache_yard: str | None = None) -> None:
        self.router = router
        self.config = config if config is not None else CastConfig()
        self.publisher = Publisher(router, cache, self.config) if cache is not None else None
        self.subscriber = Subscriber(router, inbox, retention=self.config.retention, report_every=max(1, self.config.window // 4)) if inbox is not None else None
        self._cache_at = Route(SHARE, cache_yard if cache_yard is not None else router.manor, router.estate, "")
        self.remote: RemotePublishes | None = None
        if self.subscriber is not None:
            from flowcast.cast.behaviours import word  # the one-word reason, however a refusal came

            self.subscriber.settler.outbox = Outbox(self._publish_now, router.scheduler.clock.now, word)
        if self.publisher is None:
            self.remote = RemotePublishes(router, self._cache_at, _PUB_SHARE, timeout=self.config.publish_timeout,
                                          resend=self.config.publish_resend)
            router.store.share(_PUB_SHARE)
            errors = router.store.queue(_PUB_SHARE + ".error", 1000)
            errors.watchers.append(self._on_error)
            router.handle(PUBACK, self._on_puback)
        self._close_door = None
        if self.publisher is None and router.is_manor and self._cache_at.yard != router.yard:
            self._close_door = open_door(router, self._cache_at.yard)

    def attach(self, house: Any) -> "CastService":
        """Put this service in ``house.cast`` and close it with the house."""
        house.cast = self
        house.on_close(self.close)
        if self.subscriber is not None and self.subscriber.settler.outbox is not None:  # a turn's publishes a crash interrupted
            self.subscriber.settler.outbox.resume(self.subscriber.inbox.outbox())
        return self

    def publish(self, name: str, data: Any, *, id: bytes | None = None, publisher: str = "",
                recipients: Sequence[str] | None = None, turn: bool = False) -> Any:
        """Publish ``data`` under ``name``: a ticket whose ``done`` turns true once it is on disk.

        Then ``seq`` and ``duplicate`` say where it is, or ``error`` why it
        was refused (the cache is full, an I/O error; from another house
        also ``timeout``: no answer within ``publish_timeout``, the outcome
        unknown -- publishing again under the same ``id`` is safe).  A bad name, another
        estate's prefix, bad recipients or a message over the size limit
        raise Refused at once.

        ``turn``: the publish is part of this turn (flowcast.cast.outbox):
        it commits with the turn's acknowledgements and durable tables, and
        is sent when the turn ends -- both or neither, across any crash.
        """
        id = id if id is not None else new_id()
        if turn:
            return self._stage(name, data, id, publisher, recipients)
        return self._publish_now(name, data, id, publisher, recipients)

    def _stage(self, name: str, data: Any, id: bytes, publisher: str, recipients: Sequence[str] | None) -> Any:
        if self.subscriber is None or self.subscriber.settler.outbox is None:
            raise ValueError("publish(turn=True) needs this house's CAST inbox: the outbox lives in it")
        message: dict[str, Any] = {"id": id, "name": name, "publisher": publisher, "data": data}
        if recipients is not None:  # read once: an iterator checked here must not be empty when written
            recipients = message["recipients"] = recipients if isinstance(recipients, str) else list(recipients)
        read_pub(message, self.router.estate)  # refused now, not after the commit
        text = " ".join(recipients or ())
        return self.subscriber.settler.outbox.stage((id, name, publisher, text, bytes(data)))

    def _publish_now(self, name: str, data: Any, id: bytes, publisher: str, recipients: Sequence[str] | None) -> Any:
        if self.publisher is not None:
            return self.publisher.publish(name, data, id=id, publisher=publisher, recipients=recipients)
        message: dict[str, Any] = {"id": id, "name": name, "publisher": publisher, "data": data}
        if recipients is not None:
            message["recipients"] = recipients if isinstance(recipients, str) else list(recipients)
        read_pub(message, self.router.estate)  # the same checks, before it leaves the house
        assert self.remote is not None
        return self.remote.publish(id, message)

    def subscribe(self, pattern: str, *, estate: str | None = None, into: str, split: tuple[str, int, int] | None = None,
                  lease: float | None = None, yard: str = "", ack: str = "turn") -> Subscription:
        """Deliver what ``estate`` publishes under ``pattern`` into the queue share ``into``, each message once.

        ``ack``: ``turn`` (a message is acknowledged when the turn that took it
        from the queue ends) or ``explicit`` (when :meth:`ack` is called).
        What is not acknowledged is handed over again after a crash.
        """
        if self.subscriber is None:
            raise ValueError("this house has no CAST inbox: give CastService an inbox path to subscribe")
        return self.subscriber.subscribe(pattern, estate=estate, into=into, split=split,
                                         lease=lease if lease is not None else self.config.lease, yard=yard, ack=ack)

    def table(self, name: str) -> Any:
        """The durable table ``name`` (flowcast.cast.table): what a turn writes there commits with the
        acknowledgement of what that turn consumed, both or neither."""
        if self.subscriber is None:
            raise ValueError("this house has no CAST inbox: durable tables live in it")
        return self.subscriber.table(name)

    def ack(self, item: Any) -> bool:
        """The flow is done with ``item``, a delivery of an ``ack="explicit"`` subscription; False if nothing owes it."""
        return self.subscriber is not None and self.subscriber.ack(item)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.publisher is not None:
            out["held"] = self.publisher.status()
            out["publisher"] = dict(self.publisher.counts)
        if self.remote is not None:
            out["publishing"] = {"open": len(self.remote.open), **self.remote.counts}
        if self.subscriber is not None:
            out["subscriptions"] = [
                {"pattern": s.pattern, "estate": s.estate, "into": s.into, "state": s.state, "cursor": s.cursor,
                 "delivered": s.delivered, "duplicates": s.duplicates, "gaps": len(s.gaps)}
                for s in self.subscriber.subs.values()
            ]
            out["subscriber"] = dict(self.subscriber.counts)
        return out

    # -- a stop (flowcast.house.drain) ----------------------------------------------

    def in_flight(self) -> int:
        """Publishes not answered yet: waiting for the cache's house, or (in it) for the disk and the answer."""
        waiting = len(self.remote.open) if self.remote is not None else 0
        if self.publisher is not None:
            waiting += self.publisher.cache.pending + len(self.publisher._done)
        return waiting

    def drain_report(self, reason: str) -> list[bytes]:
        """The ids of the publishes still waiting for the cache's answer, each failed now with ``reason``.

        For a house that stops: the answer could only come to a house that
        is gone, so the ticket ends here, refused, and the caller reports the
        ids (log, status) -- the cache may still have stored them, which a
        resend by id (the cache's dedupe) settles.
        """
        if self.remote is None:
            return []
        ids = list(self.remote.open)
        for id in ids:
            self.remote.refused(id, reason)
        return ids

    def close(self) -> None:
        if self._close_door is not None:
            self._close_door()
            self._close_door = None
        if self.remote is not None:
            self.remote.close()
            self.router.unhandle(PUBACK, self._on_puback)
            errors = self.router.store.get(_PUB_SHARE + ".error")
            if errors is not None and self._on_error in errors.watchers:
                errors.watchers.remove(self._on_error)
        if self.subscriber is not None:
            self.subscriber.close()
        if self.publisher is not None:
            self.publisher.close()

    # -- answers from the cache's house -----------------------------------------------

    def _on_puback(self, landing: Landing) -> None:
        if landing.src.estate != self.router.estate:
            landing.refuse("cast.puback comes from this estate's cache", "spoofed_puback")
        id, seq, duplicate = read_puback(landing.data)
        assert self.remote is not None
        self.remote.acked(id, seq, duplicate)

    def _on_error(self, share: Any) -> None:
        """Routed errors about this house's publishes: the cache's refusals name the id; the lane's do not."""
        remote = self.remote
        assert remote is not None
        while share.queue:
            report = share.queue.popleft().get("data") or {}
            id = report.get("id") if isinstance(report, dict) else None
            kind = report.get("kind", "refused") if isinstance(report, dict) else "refused"
            if isinstance(id, bytes) and kind not in _PASSING:
                remote.refused(id, f"{kind}: {report.get('reason', '')}")
            else:  # a transport failure (undelivered, no_yard, ...) or a cache closing: try again while time remains
                remote.transport_failed()
