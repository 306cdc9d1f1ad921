"""Stock CAST behaviours: publish from a share, subscribe into a queue, from flows.

    do queue to inbox with bound 1000 at enter
    do cast subscribe to inbox with pattern "abc/messages/**" mod 2 k 0
    do cast publish from outbox to acks with name "abc/messages/alice/{id}" recipients "bob@xyz"

Both use the house's :class:`~flowcast.cast.CastService` (``house.cast``,
built from the estate layout's ``cast:`` section); a behaviour written by
a user calls the same service directly.

``cast subscribe`` is a class behaviour with a lifecycle because a lease
belongs to a frame: entering the frame subscribes (or resumes from the
cursor the inbox kept), leaving it ends the lease at the publisher at once
instead of letting it run out; the subscriber renews while it is held.

``cast publish`` never loses what it takes from its source: an item leaves
the source only when it is handed to the cache, and a refusal (cache full,
a bad name, a message too large) comes back to the flow with the data, in
``SOURCE.error``, so the flow may publish it again.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import msgpack

from flowcast.behaving.registry import Io, behaviour
from flowcast.cast.ids import new_id
from flowcast.cast.names import check_name, check_pattern, check_recipients, check_split

__all__ = ["CastPublish", "CastSubscribe", "encode", "word"]

#: Publishes handed to the cache and not yet durable, per behaviour: past this
#: the source is left alone (back-pressure on the flow, nothing dropped).
MAX_PENDING = 10_000
#: Refusals kept in ``SOURCE.error`` (each carries its data to publish again).
ERROR_BOUND = 10_000


def _service(io: Io, what: str) -> Any:
    house = io.house
    cast = getattr(house, "cast", None) if house is not None else None
    if cast is None:
        raise ValueError(f"{what} needs CAST in this house: give the estate layout a 'cast:' section (docs/layouts.md)")
    return cast


def word(error: BaseException) -> str:
    """The one-word reason of a refusal (``cache_full``, ``too_large``...), however it came.

    The cache's errors carry it in ``reason``, routed refusals in ``kind``,
    and a publish refused at another house as the head of its message.
    """
    kind = getattr(error, "kind", None)
    if kind == "publish_refused":
        head = str(getattr(error, "reason", error)).split(":", 1)[0]
        return head if head.isidentifier() else kind  # "cache_full: ..." from the cache's house, else a sentence
    if isinstance(kind, str):
        return kind
    reason = getattr(error, "reason", None)
    return reason if isinstance(reason, str) else type(error).__name__


def encode(item: Any) -> bytes:
    """What a flow item publishes as: bytes as they are, text as UTF-8, anything else as msgpack.

    A routed envelope (as a queue share holds what came by route) publishes
    its ``data``: the route is this estate's business, not the subscriber's.
    """
    if isinstance(item, dict) and "route" in item and "data" in item:
        item = item["data"]
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, str):
        return item.encode("utf-8")
    return msgpack.packb(item, use_bin_type=True)


@behaviour("cast.publish")
class CastPublish:
    """Publish each item of the ``from`` queue (or each change of a value share) under ``name``.

    ``name`` may hold ``{id}``, replaced by the message id in hex (the
    draft's ``abc/messages/alice/<id>``).  ``recipients``: space-separated
    ``estate`` or ``user@estate`` (public without).  Each acknowledgement
    ``{id, name, seq, duplicate}`` goes into the ``to`` queue share when one
    is given; a refusal ``{id, name, reason, data}`` into ``SOURCE.error``.
    """

    def __init__(self, io: Io, name: str, recipients: str = "", publisher: str = "") -> None:
        if io.input is None:
            raise ValueError("cast publish needs a share to publish: 'do cast publish from SHARE with name NAME'")
        check_name(name.replace("{id}", "0" * 32))  # a bad name is a load error, not one refusal per item
        self.io = io
        self.name = name
        self.recipients = check_recipients(recipients.split()) if recipients.strip() else None
        self.publisher = publisher
        self.acks = io.store.queue(io.output.name) if io.output is not None else None
        self.errors = io.store.queue(io.input.name + ".error", ERROR_BOUND)
        self.pending: deque[tuple[Any, str, bytes]] = deque()
        self.sent_version = 0
        self.counts = {"published": 0, "acked": 0, "refused": 0}

    def __call__(self) -> None:
        cast = _service(self.io, "cast publish")
        self._settle()
        share = self.io.input
        queue = getattr(share, "queue", None)
        if queue is not None:
            while queue and len(self.pending) < MAX_PENDING:
                self._publish(cast, queue.popleft())
        elif share.version != self.sent_version and len(self.pending) < MAX_PENDING:
            self.sent_version = share.version
            self._publish(cast, share.fields())
        self._settle()

    def _publish(self, cast: Any, item: Any) -> None:
        id = new_id()
        name = self.name.replace("{id}", id.hex())
        try:
            data = encode(item)
            ticket = cast.publish(name, data, id=id, publisher=self.publisher, recipients=self.recipients)
        except Exception as error:  # noqa: BLE001 - refused at once (bad name, too large): back to the flow with the item
            self._refused(id, name, item, word(error), str(error))
            return
        self.counts["published"] += 1
        self.pending.append((ticket, name, data))

    def _settle(self) -> None:
        """Report every ticket that completed, in the order they were published where they complete in order."""
        if not self.pending:
            return
        still: deque[tuple[Any, str, bytes]] = deque()
        for ticket, name, data in self.pending:
            if not ticket.done:
                still.append((ticket, name, data))
            elif ticket.error is not None:
                error = ticket.error
                self._refused(ticket.id, name, data, word(error), str(error))
            else:
                self.counts["acked"] += 1
                if self.acks is not None:
                    self.acks.push({"id": ticket.id, "name": name, "seq": ticket.seq, "duplicate": ticket.duplicate})
        self.pending = still

    def _refused(self, id: bytes, name: str, data: Any, reason: str, message: str) -> None:
        self.counts["refused"] += 1
        report = {"id": id, "name": name, "reason": reason, "message": message, "data": data, "at": time.time()}
        if self.errors.bound and len(self.errors.queue) >= self.errors.bound:
            self.errors.queue.append(report)  # past the bound: a refusal is never the item dropped
        else:
            self.errors.push(report)


@behaviour("cast.subscribe")
class CastSubscribe:
    """Deliver what ``estate`` publishes under ``pattern`` into the ``to`` queue share, each message once.

    The lease is held while the frame is active: ``enter`` subscribes (or
    resumes from the kept cursor), ``exit`` ends it at the publisher.
    ``mod M k`` (with ``key`` id, publisher or name) takes this receiver's
    share of a split; ``lease`` asks for a shorter lease than the estate's.
    A refusal by the publisher (not allowed, a bad pattern) is pushed once
    into ``INTO.error`` as ``{pattern, estate, reason}``.  ``ack``: ``turn``
    (a message is acknowledged when the turn that took it ends) or
    ``explicit`` (``io.house.cast.ack(item)``); what is not acknowledged is
    handed over again after a crash, flagged ``redelivered``.
    """

    def __init__(self, io: Io, pattern: str, estate: str = "", mod: int = 0, k: int = 0, key: str = "id",
                 lease: float = 0.0, yard: str = "", ack: str = "turn") -> None:
        if io.output is None:
            raise ValueError("cast subscribe needs a queue share for deliveries: 'do cast subscribe to QUEUE with pattern P'")
        check_pattern(pattern)
        self.split = check_split((key, mod, k)) if mod else None
        if not mod and k:
            raise ValueError("cast subscribe: k without mod; give 'mod M k K'")
        if lease < 0:
            raise ValueError(f"cast subscribe: lease must be positive seconds, not {lease!r}")
        if ack not in ("turn", "explicit", "none"):
            raise ValueError(f"cast subscribe: ack is 'turn', 'explicit' or 'none', not {ack!r}")
        self.ack = ack
        self.io = io
        self.pattern = pattern
        self.estate = estate or None
        self.lease = lease or None
        self.yard = yard
        self.into = io.output.name
        self.sub: Any = None
        self.reported = False

    def enter(self) -> None:
        cast = _service(self.io, "cast subscribe")
        self.reported = False
        self.sub = cast.subscribe(self.pattern, estate=self.estate, into=self.into,
                                  split=tuple(self.split) if self.split is not None else None,
                                  lease=self.lease, yard=self.yard, ack=self.ack)

    def __call__(self) -> None:
        sub = self.sub
        if sub is not None and sub.state == "refused" and not self.reported:
            self.reported = True
            errors = self.io.store.queue(self.into + ".error", ERROR_BOUND)
            errors.push({"pattern": self.pattern, "estate": sub.estate, "reason": sub.error})

    def exit(self) -> None:
        sub, self.sub = self.sub, None
        if sub is not None and sub.state != "refused":
            sub.close()
