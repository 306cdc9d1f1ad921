"""CAST's cache and delivery events as export rows (docs/export.md, docs/cast.md "Export").

The questions an operator asks of CAST cross the two estates: how far
behind is each subscriber, how long from publish to the application, how
much was sent again because someone was away.  Neither end can answer
alone, so each records what it saw -- the publishing house what it stored,
forwarded, resent from a cursor, declared gone (gap) and let lapse (lease);
the subscribing house what it handed to the application and what it
dropped as a duplicate -- and the Spark ``cast`` job joins them by message
id and subscription id (the sid is the subscriber's, carried in every
CAST message, so it names the same subscription at both ends).

Like router recording this costs nothing without a recorder: the
listeners go on the publisher's and subscriber's hooks
(:data:`flowcast.cast.publisher.HOOKS`, :data:`flowcast.cast.subscriber.HOOKS`)
and come off again on :meth:`CastRecorder.detach`; with none installed each
firing point is one attribute check.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CastRecorder"]


class CastRecorder:
    """The listeners that record one CastService's events into ``sink`` (a Recorder's ``cast``)."""

    def __init__(self, service: Any, sink: Any) -> None:
        self.service = service
        self.sink = sink
        self.clock = service.router.scheduler.clock.now
        self._installed: list[tuple[Any, str, Any]] = []
        publisher, subscriber = getattr(service, "publisher", None), getattr(service, "subscriber", None)
        if publisher is not None:
            self._install(publisher.hooks, stored=self.stored, forwarded=self.forwarded, resync=self.served,
                          gap=self.gap_sent, lease_expired=self.lease_expired)
        if subscriber is not None:
            self._install(subscriber.hooks, delivered=self.delivered, duplicate=self.duplicate,
                          gap=self.gap_delivered, resync=self.asked)

    def _install(self, hooks: Any, **listeners: Any) -> None:
        for name, listener in listeners.items():
            hooks.add(name, listener)
            self._installed.append((hooks, name, listener))

    def detach(self) -> None:
        for hooks, name, listener in self._installed:
            hooks.discard(name, listener)
        self._installed.clear()

    # -- the publishing house -------------------------------------------------------

    def stored(self, ticket: Any) -> None:
        """Durable in the cache (a retried publish that was there already says ``duplicate``)."""
        self.sink.cast("cast-stored", ticket.id.hex(), None, seq=ticket.seq, name=ticket.name,
                       detail="duplicate" if ticket.duplicate else None)

    def forwarded(self, held: Any, after: int, upto: int, count: int, size: int) -> None:
        self.sink.cast("cast-forwarded", None, held.estate, size=size, seq=after + 1, upto=upto, count=count,
                       sub=held.sid.hex(), name=held.pattern)

    def served(self, held: Any, cursor: int, high: int) -> None:
        """A subscribe or renew from a cursor behind the cache: everything after it is sent again."""
        self.sink.cast("cast-resync", None, held.estate, seq=cursor + 1, upto=high, count=high - cursor,
                       sub=held.sid.hex(), name=held.pattern, detail="served")

    def gap_sent(self, held: Any, start: int, upto: int) -> None:
        self.sink.cast("cast-gap", None, held.estate, seq=start, upto=upto, count=upto - start + 1,
                       sub=held.sid.hex(), name=held.pattern, detail="sent")

    def lease_expired(self, held: Any) -> None:
        self.sink.cast("cast-lease-expired", None, held.estate, seq=held.heard, upto=held.sent,
                       sub=held.sid.hex(), name=held.pattern)

    # -- the subscribing house ------------------------------------------------------

    def delivered(self, sub: Any, item: dict[str, Any]) -> None:
        """Handed to the application's queue; ``latency`` is this clock minus the publish stamp."""
        stamp = item.get("stamp")
        latency = self.clock() - stamp if isinstance(stamp, (int, float)) else None
        data = item.get("data")
        size = len(data) if isinstance(data, (bytes, str)) else None
        self.sink.cast("cast-delivered", item["id"].hex(), sub.estate, size=size, latency=latency, seq=item["seq"],
                       sub=sub.sid.hex(), name=item.get("name"))

    def duplicate(self, sub: Any, msg: Any) -> None:
        seq, id, name = msg[0], msg[1], msg[2]
        self.sink.cast("cast-duplicate", id.hex(), sub.estate, seq=seq, sub=sub.sid.hex(), name=name)

    def gap_delivered(self, sub: Any, start: int, upto: int) -> None:
        self.sink.cast("cast-gap", None, sub.estate, seq=start, upto=upto, count=upto - start + 1,
                       sub=sub.sid.hex(), name=sub.pattern, detail="delivered")

    def asked(self, sub: Any) -> None:
        """The subscriber saw a hole (or lost its lease) and subscribes again from its cursor."""
        self.sink.cast("cast-resync", None, sub.estate, seq=sub.cursor + 1, sub=sub.sid.hex(), name=sub.pattern,
                       detail="asked")
