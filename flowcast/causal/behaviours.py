"""Stock causal behaviours: publish a share's items to a topic, deliver a topic in causal order into a queue.

    do queue to outbox at enter
    do causal publish from outbox to acks with topic "log"
    do causal subscribe to delivered with topic "log" valid "log valid"

Both use the house's :class:`~flowcast.causal.service.CausalService`
(``house.causal``, built from the layout's ``causal:`` section in the
house that holds the CAST cache); a behaviour written by a user calls the
same service directly.

``causal publish`` never loses what it takes from its source: an item
leaves the source only when it is handed to the service, and a refusal (no
key for the topic, a bad dep, a dep still not stored after ``wait``
seconds, too large, storage refused it) comes back to
the flow with the item, in ``SOURCE.error``, so the flow may publish it
again.  An item is either the content itself (bytes as they are, text as
UTF-8, anything else as msgpack, like ``cast publish``) with the topic's
current frontier as deps, or a mapping ``{"content": ..., "deps": [...],
"tags": [...]}`` naming its deps explicitly (a reply names what it
answers): each dep a :class:`~flowcast.causal.message.TopicMsgID`, a
delivery or acknowledgement mapping (``hash``), or a hash (32 bytes or 64
hex digits) the relay holds.

``causal subscribe`` holds its subscription while its frame is active, as
``cast subscribe`` holds a lease: deliveries are only pushed while someone
is there to take them, and what arrives meanwhile waits in Local Storage.

``valid`` names predicate 2 (docs/causal.md) as a behaviour, so an
application's rule lives in its flow's behaviour module like the rest of
its code.  The convention is a **function behaviour taking the message**::

    @behaviour("log.valid")
    def log_valid(io, msg):          # msg: flowcast.causal.message.TopicMsg
        return len(msg.content) < 1000 or "too long"

called with the subscribing act's ``Io`` (its store, clock and house) and
answering True or None (valid), False, or a string (the reason it is
invalid).  It is looked up when the flow is built, so a misspelt name is a
load error.  A predicate that raises rejects that message with the reason
``predicate_raised: ...`` (the broker's rule): the message is kept as
evidence and reported, never dropped silently, and the house keeps running.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable

from flowcast.behaving.registry import Io, behaviour
from flowcast.cast.behaviours import encode
from flowcast.causal.message import EPOCH_TAG, CausalError, TopicMsg, TopicMsgID, check_tag, check_topic

__all__ = ["CausalPublish", "CausalSubscribe", "dep_ids", "dep_specs", "predicate_of"]

#: Publishes handed to the service and not yet durable, per behaviour: past
#: this the source is left alone (back-pressure on the flow, nothing dropped).
MAX_PENDING = 10_000
#: Refusals kept in ``SOURCE.error`` (each carries its item to publish again).
ERROR_BOUND = 10_000


def _service(io: Io, what: str) -> Any:
    house = io.house
    causal = getattr(house, "causal", None) if house is not None else None
    if causal is None:
        raise ValueError(f"{what} needs the causal relay in this house: give the estate layout a 'causal:' section;"
                         " the relay runs in the house that holds the CAST cache (docs/layouts.md)")
    return causal


def _hash_of(dep: Any) -> bytes:
    if isinstance(dep, dict):
        dep = dep.get("hash")
    if isinstance(dep, str):
        try:
            dep = bytes.fromhex(dep)
        except ValueError:
            raise CausalError(f"a dep's hash is 64 hex digits, got {dep[:80]!r}", "bad_dep") from None
    if isinstance(dep, (bytearray, memoryview)):
        dep = bytes(dep)
    if not isinstance(dep, bytes) or len(dep) != 32:
        raise CausalError(f"a dep is an id, a delivery, or a 32-byte hash, got {type(dep).__name__}", "bad_dep")
    return dep


def dep_specs(deps: Any) -> list[TopicMsgID | bytes]:
    """What an item's ``deps`` name: ids as they are, every other form (a delivery, an acknowledgement, hex) as its hash."""
    if isinstance(deps, (str, bytes, dict, TopicMsgID)):
        deps = [deps]
    if not isinstance(deps, (list, tuple)):
        raise CausalError(f"deps are a list of deliveries, hashes or ids, not {type(deps).__name__}", "bad_dep")
    return [dep if isinstance(dep, TopicMsgID) else _hash_of(dep) for dep in deps]


def dep_ids(causal: Any, topic: str, deps: Any) -> list[TopicMsgID]:
    """The ids ``deps`` name: ids as they are, hashes (or mappings with one) looked up in the relay's index.

    A hash the relay does not hold cannot be depended on from here: its
    signature is unknown, and a dep is named by its signed hash.
    """
    out = []
    for dep in dep_specs(deps):
        found = dep if isinstance(dep, TopicMsgID) else causal.held_id(topic, dep)
        if found is None:
            raise CausalError(f"this relay holds no message {dep.hex()[:16]}... of topic {topic!r} to depend on", "unknown_dep")
        out.append(found)
    return out


def _tags(text: str) -> tuple[str, ...]:
    tags = tuple(check_tag(tag) for tag in text.split())
    if EPOCH_TAG in tags:
        raise CausalError(f"the tag {EPOCH_TAG!r} is reserved: only the topic's owner opens an epoch (genesis)", "bad_tag")
    return tags


@behaviour("causal.publish")
class CausalPublish:
    """Publish each item of the ``from`` queue (or each change of a value share) to ``topic``.

    ``tags``: space-separated tags for every message.  ``wait``: seconds a
    publish naming a dep this relay has not stored yet waits for it before
    it is refused ``unknown_dep`` (absent: the layout's ``dep_wait``; 0: at
    once).  Each durable message is acknowledged into the ``to`` queue
    share as ``{topic, epoch, publisher, hash, deps}`` (hex); a refusal
    ``{reason, message, data, at}`` goes into ``SOURCE.error``.
    """

    def __init__(self, io: Io, topic: str, tags: str = "", wait: float = -1.0) -> None:
        if io.input is None:
            raise ValueError("causal publish needs a share to publish: 'do causal publish from SHARE with topic TOPIC'")
        check_topic(topic)  # a bad topic is a load error, not one refusal per item
        self.io = io
        self.topic = topic
        self.tags = _tags(tags)
        if wait < 0 and wait != -1.0:
            raise ValueError(f"causal publish: wait is seconds >= 0, not {wait!r}")
        self.wait = None if wait == -1.0 else float(wait)  # None: the estate's dep_wait
        self.acks = io.store.queue(io.output.name) if io.output is not None else None
        self.errors = io.store.queue(io.input.name + ".error", ERROR_BOUND)
        self.pending: deque[tuple[Any, Any]] = deque()
        self.sent_version = 0
        self.counts = {"published": 0, "acked": 0, "refused": 0}

    def __call__(self) -> None:
        causal = _service(self.io, "causal publish")
        self._settle()
        share = self.io.input
        queue = getattr(share, "queue", None)
        if queue is not None:
            while queue and len(self.pending) < MAX_PENDING:
                self._publish(causal, queue.popleft())
        elif share.version != self.sent_version and len(self.pending) < MAX_PENDING:
            self.sent_version = share.version
            self._publish(causal, share.fields())
        self._settle()

    def _publish(self, causal: Any, item: Any) -> None:
        try:
            if isinstance(item, dict) and "content" in item:
                content = encode(item["content"])
                deps = dep_specs(item["deps"]) if item.get("deps") is not None else None
                tags = item.get("tags")
                if tags is None:
                    tags = self.tags
                elif isinstance(tags, str):
                    tags = _tags(tags)
                elif isinstance(tags, (list, tuple)):
                    tags = tuple(tags)
                else:
                    raise CausalError(f"tags are a string or a list of strings, not {type(tags).__name__}", "bad_tag")
            else:
                content, deps, tags = encode(item), None, self.tags
            if deps is None:
                published = causal.publish(self.topic, content, tags=tags)
            else:  # a dep its relay has not stored yet is waited for, a bounded time (flowcast/causal/depwait.py)
                published = causal.publish_waiting(self.topic, content, tags=tags, deps=deps, wait=self.wait)
        except Exception as error:  # noqa: BLE001 - refused at once (no key, a bad dep, too large): back to the flow with the item
            self._refused(item, getattr(error, "reason", type(error).__name__), str(error))
            return
        self.counts["published"] += 1
        self.pending.append((published, item))

    def _settle(self) -> None:
        """Acknowledge every publish that is durable, in the order published; hand back every one refused."""
        still: deque[tuple[Any, Any]] = deque()
        for published, item in self.pending:
            if not published.done:
                still.append((published, item))
            elif published.error is not None:
                error = published.error
                self._refused(item, getattr(error, "reason", None) or getattr(error, "kind", None) or type(error).__name__, str(error))
            else:
                self.counts["acked"] += 1
                if self.acks is not None:
                    msg: TopicMsg = published.msg
                    self.acks.push({"topic": msg.topic, "epoch": msg.epoch, "publisher": msg.publisher.hex(), "hash": msg.hash.hex(),
                                    "deps": [dep.hash.hex() for dep in msg.deps]})
        self.pending = still

    def _refused(self, item: Any, reason: str, message: str) -> None:
        self.counts["refused"] += 1
        report = {"topic": self.topic, "reason": reason, "message": message, "data": item, "at": time.time()}
        if self.errors.bound and len(self.errors.queue) >= self.errors.bound:
            self.errors.queue.append(report)  # past the bound: a refusal is never the item dropped
        else:
            self.errors.push(report)


def predicate_of(io: Io, name: str) -> Callable[[TopicMsg], Any]:
    """The behaviour ``name`` as predicate 2: a function behaviour ``(io, msg)``; anything else is a load error."""
    registry = io.registry
    found = registry.find(name) if registry is not None else None
    if found is None:
        from flowcast.errors import did_you_mean

        known = registry.names() if registry is not None else []
        raise ValueError(f"causal subscribe: no behaviour {name!r} to use as valid (predicate 2)"
                         + (f"; {did_you_mean(name, known)}" if did_you_mean(name, known) else "; load its module with 'load PATH'"))
    required = [p.name for p in found.params if p.required]
    if found.form != "function" or len(required) != 1:
        raise ValueError(f"causal subscribe: valid {name!r} must be a function behaviour taking (io, msg)"
                         f" and answering True, False or a reason; it is a {found.form} taking {required or 'nothing'}")
    target = found.target
    return lambda msg: target(io, msg)


@behaviour("causal.subscribe")
class CausalSubscribe:
    """Deliver ``topic`` into the ``to`` queue share in causal order, each message once, while the frame is active.

    ``valid``: a function behaviour ``(io, msg)`` used as predicate 2.
    ``name``: the subscription's name, under which its delivered set is
    kept across restarts (default: the queue share's name).
    ``ack``: ``turn`` (the default: a delivery is acknowledged when the turn
    that took it off the queue ends, so a behaviour that handles what it
    takes needs no code) or ``explicit`` (the consumer calls
    ``house.causal.ack(item)`` when done, for work that spans turns).  What
    was not acknowledged is handed over again after a crash, first, with
    ``redelivered`` true.
    """

    def __init__(self, io: Io, topic: str, valid: str = "", name: str = "", ack: str = "turn") -> None:
        if io.output is None:
            raise ValueError("causal subscribe needs a queue share for deliveries: 'do causal subscribe to QUEUE with topic T'")
        if ack not in ("turn", "explicit"):
            raise ValueError(f"causal subscribe: ack is 'turn' or 'explicit', not {ack!r}")
        self.ack = ack
        check_topic(topic)
        self.io = io
        self.topic = topic
        self.into = io.output.name
        self.name = name or None
        self.predicate = predicate_of(io, valid) if valid else None
        self.sub: Any = None

    def enter(self) -> None:
        causal = _service(self.io, "causal subscribe")
        self.sub = causal.subscribe(self.topic, self.into, predicate=self.predicate, name=self.name, ack=self.ack)

    def __call__(self) -> None:
        return None

    def exit(self) -> None:
        sub, self.sub = self.sub, None
        if sub is not None:
            sub.close()
