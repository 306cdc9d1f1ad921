"""What a router does with a message of a given tag, once it has arrived.

A router moves parcels; what a tag *means* is not its business.  Most tags
mean nothing to it: the message lands in its share (a value share is
updated, a queue share gets the message pushed).  A few mean something --
``read`` asks for the share's fields, ``error`` reports a refusal -- and the
layers to come add more (a subscription and its lease, a signed causal
message, a fetch of missing ones).  Each such tag has a *handler* here,
registered with :meth:`Router.handle <flowcast.routing.Router.handle>`, so a
new layer plugs in beside the router instead of growing it.

A handler is called with a :class:`Landing`: the message as it arrived (its
routes, tag, stamp, header extensions, data, whether it came reliably, its
destination share) and the router's two ways to answer, ``reply`` and
``refuse``, so a handler's answers and refusals take the router's usual
paths (counted, noted, an ``error`` routed back to the source).

``access`` names the policy check a road arrival of that tag passes
*before* its handler runs: ``write`` (the default), ``read``, ``reply`` (let
in without a rule when it answers a message this estate sent, see
flowcast.routing.replies; otherwise as ``write``) or a permission declared
with :func:`flowcast.routing.policy.declare_access`.  Lane arrivals are the
estate's own and pass no policy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, NoReturn

from flowcast.errors import Error
from flowcast.routing.parcel import ParcelError, open_data, open_ext
from flowcast.routing.policy import is_access
from flowcast.routing.route import Route
from flowcast.store.share import QueueShare
from flowcast.store.sizes import estimate

__all__ = [
    "Handler", "Landing", "Refused", "ACCESS_REPLY", "ERROR_QUEUE_BOUND", "UNSET",
    "builtin_handlers", "check_tag", "check_access", "envelope", "land", "push_into",
]

#: The access of tags that answer a message (``error``, ``value``).
ACCESS_REPLY = "reply"
#: Errors for share S land in the queue share ``S.error``, at most this many kept.
ERROR_QUEUE_BOUND = 1000
#: Data not decoded yet: it is in the parcel, from its offset on.
UNSET: Any = object()

log = logging.getLogger("flowcast.routing")


def envelope(src: Route, dst: Route, tag: str, stamp: float, data: Any) -> dict[str, Any]:
    """A routed message as a flow sees it: ``{route: {src, dst}, tag, stamp, data}``."""
    return {"route": {"src": list(src), "dst": list(dst)}, "tag": tag, "stamp": stamp, "data": data}


class Refused(Error):
    """A message the router will not deliver: ``reason`` for people, ``kind`` the counter.

    Raised by a handler (or :meth:`Landing.refuse`) to refuse the message
    it was given; the router counts it, notes it and answers the source
    with an ``error`` report, as for any refusal.
    """

    #: Messages refused, when it is not just the one (a batch: flowcast.routing.batch); None: the
    #: router counts the parcel the refusal is of.
    count: int | None = None
    #: Already told to the router's ``refused`` hook, message by message (a batch's landing).
    heard = False
    #: Counted and noted, but its source not answered: it heard the same a moment ago, and an
    #: answer to every message of a flood would make the refusals the flood's amplifier.
    quiet = False

    def __init__(self, reason: str, kind: str, hint: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.counter = kind
        #: for this estate's operator only (its log and status), never sent to the source
        self.hint = hint

    @property
    def kind(self) -> str:
        return self.counter


class Handler(NamedTuple):
    """A registered tag: its handler (None: lands like data) and its policy access."""

    handler: Callable[["Landing"], None] | None
    access: str


class Landing:
    """One message at the house it was addressed to, as a handler sees it.

    ``ext`` (the header extensions) is read from the parcel when first asked
    for: most handlers never look, and the parcel's header was checked when
    it arrived.
    """

    __slots__ = ("router", "pair", "tag", "stamp", "parcel", "data", "reliable", "share", "_ext")

    def __init__(self, router: Any, pair: Any, tag: str, stamp: float, parcel: Any, data: Any, reliable: bool, share: Any) -> None:
        self.router = router
        self.pair = pair
        self.tag = tag
        self.stamp = stamp
        self.parcel = parcel  # as it came, or None when it was made in this house without extensions
        self.data = data
        self.reliable = reliable
        self.share = share
        self._ext: Mapping[str, Any] | None = None

    @property
    def src(self) -> Route:
        return self.pair.src

    @property
    def dst(self) -> Route:
        return self.pair.dst

    @property
    def ext(self) -> Mapping[str, Any]:
        """The header extensions, ``{}`` when the parcel has none."""
        if self._ext is None:
            try:
                self._ext = open_ext(self.parcel) if self.parcel is not None else {}
            except ParcelError as error:  # checked on arrival; only a parcel made wrongly here gets this
                raise Refused(f"malformed message ({error})", "malformed") from None
        return self._ext

    def reply(self, data: Any, *, tag: str = "value", ext: Mapping[str, Any] | None = None, packed: bytes | None = None) -> bool:
        """Answer the source share, from the destination share, the way the message came.

        ``packed`` is ``data`` already packed (a share's cached encoding,
        flowcast.routing.reads), sent as it is.  False when the router
        refused the answer (the reason is counted and reported as for any send).
        """
        if packed is None:
            return self.router.answer(self.pair, data, tag=tag, ext=ext)
        return self.router.answer(self.pair, data, tag=tag, ext=ext, packed=packed)

    def refuse(self, reason: str, kind: str = "refused") -> NoReturn:
        """Refuse the message: counted as ``kind``, and the source hears ``reason``."""
        raise Refused(reason, kind)


def check_tag(tag: Any) -> str:
    if tag.__class__ is not str or not 0 < len(tag) <= 64:
        raise ValueError("a handled tag is a string of 1 to 64 characters")
    return tag


def check_access(access: Any) -> str:
    if access != ACCESS_REPLY and not is_access(access):
        raise ValueError(
            f"access {str(access)[:40]!r} is not write, read, reply nor a permission declared with policy.declare_access"
        )
    return access


# -- the router's own tags ------------------------------------------------------


def land_error(landing: Landing) -> None:
    """An error report lands beside its share, in the queue ``SHARE.error``, never in it:
    a value share that changed would be sent again by 'route send', fail again, for ever.

    The queue keeps ERROR_QUEUE_BOUND reports and the store's error-queue byte
    budget (flowcast.store.store.ERROR_QUEUE_BYTES) of them, each counted at
    what it cost to carry; a report that does not fit is the one dropped,
    counted ``errors_overflowed`` (and its bytes ``errors_overflowed_bytes``),
    never answered: an error about an error would never end.
    """
    router = landing.router
    name = landing.dst.share + ".error"
    try:
        errors = router.store.queue(name, ERROR_QUEUE_BOUND)
    except (TypeError, ValueError):
        raise Refused(f"share {name!r} exists and is not a queue", "no_share") from None
    _count_returned(router, landing)
    parcel = landing.parcel
    size = len(parcel) if parcel is not None else (estimate(landing.data) if errors.budget else 0)
    try:
        pushed = errors.push(envelope(landing.src, landing.dst, landing.tag, landing.stamp, landing.data), size)
    except Exception as error:  # noqa: BLE001 - a watcher is user code
        raise Refused(f"share {name!r} refused the report: {error!r}", "update_failed") from None
    if not pushed:
        router.counts["errors_overflowed"] += 1
        router.counts["errors_overflowed_bytes"] += size


#: Kinds of returned errors counted apart (``errors_back_KIND``); the kind comes from the remote, so
#: only a short name is taken, and only this many different ones: the rest are ``errors_back_other``.
MAX_RETURNED_KINDS = 24


def _count_returned(router: Any, landing: Landing) -> None:
    """An error came back for a message this house sent: counted (and logged within the router's log
    budget) here, at the sender, where its operator looks -- not only at the receiver that refused it."""
    data = landing.data if isinstance(landing.data, dict) else {}
    kind = data.get("kind")
    counts = router.counts
    if not (isinstance(kind, str) and kind.isidentifier() and kind.islower() and len(kind) <= 24):
        kind = "other"
    key = f"errors_back_{kind}"
    if key not in counts and sum(1 for k in counts if k.startswith("errors_back_")) >= MAX_RETURNED_KINDS:
        key = "errors_back_other"
    counts["errors_back"] += 1
    counts[key] += 1
    reason = data.get("reason")
    router.denials.returned(kind, reason if isinstance(reason, str) else "", landing.src, landing.dst)


def builtin_handlers() -> dict[str, Handler]:
    """The tags every router knows: ``error`` and ``value`` answer, ``read`` asks (flowcast.routing.reads)."""
    from flowcast.routing.reads import Reads  # it needs Refused and Landing from here

    return {
        "error": Handler(land_error, ACCESS_REPLY),
        "value": Handler(None, ACCESS_REPLY),
        "read": Handler(Reads().answer, "read"),
    }


# -- landing ----------------------------------------------------------------------


def push_into(queue: QueueShare, message: dict[str, Any], size: int, name: str) -> None:
    """Push a landed message into ``queue`` (``name`` as the route said it), charged ``size`` bytes;
    Refused (queue_full, update_failed) if not."""
    try:
        pushed = queue.push(message, size)
    except Exception as error:  # noqa: BLE001 - a watcher is user code
        raise Refused(f"share {name!r} refused the message: {error!r}", "update_failed") from None
    if not pushed:
        raise Refused(queue.full(size), "queue_full")


def land(
    router: Any, pair: Any, tag: str, stamp: float, parcel: Any, offset: int, data: Any, reliable: bool, size: int | None = None
) -> None:
    """A message at the house it was addressed to: to its tag's handler, or into its share.

    ``data`` is UNSET when it is still in ``parcel`` (from ``offset``): it is
    decoded here, in the one house that needs it.  ``size`` is what the
    message cost to carry, when not the parcel's length (one of a batch).
    Refused says why not.
    """
    src, dst = pair.src, pair.dst
    try:
        share = router.store.get(dst.share)
    except ValueError:
        share = None
    if share is None:
        told, hint = router.near_miss.suggest(router, dst.share, src, tag)
        reason = f"no share {dst.share!r} in yard {router.yard!r} of {router.estate!r}"
        raise Refused(f"{reason}; {told}" if told else reason, "no_share", "" if told else hint)
    if data is UNSET:
        try:
            data = open_data(parcel, offset)
        except ParcelError as error:
            raise Refused(f"malformed message ({error})", "malformed") from None
    handler = router._handlers.get(tag)
    if handler is not None and handler.handler is not None:
        try:
            handler.handler(Landing(router, pair, tag, stamp, parcel, data, reliable, share))
        except Refused:
            raise
        except Exception as error:  # noqa: BLE001 - a handler is another layer's code: its failure is this message's
            log.debug("handler for tag %r failed", tag, exc_info=True)
            raise Refused(f"handler for tag {tag!r} failed: {error!r}"[:300], "handler_failed") from None
        return
    if isinstance(share, QueueShare):
        # Made in this house: passed by reference, never packed, so estimated (flowcast.store.sizes).
        if size is None:
            size = len(parcel) if parcel is not None else (estimate(data) if share.budget else 0)
        push_into(share, envelope(src, dst, tag, stamp, data), size, dst.share)
        return
    try:
        if isinstance(data, Mapping):
            share.update(data)
        else:
            share.update(value=data)
    except Exception as error:  # noqa: BLE001 - a share's watcher is user code
        raise Refused(f"share {dst.share!r} refused the update: {error}", "update_failed") from None
