"""The CAST messages, read strictly: whatever a remote sends, a clear refusal or a valid message.

A publisher serves estates it does not control, so every field of every
message from a road is checked here before anything else sees it, and a
bad one is a :class:`~flowcast.routing.Refused` naming the field and a
counter kind; the router counts it and routes the reason back.  The caps
are docs/cast.md's "Limits".

Name and pattern checks are the minimum the protocol needs; they stand in
until ``flowcast.cast.names`` (the cache's half) lands, which the
integrator switches them to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from flowcast.cast import names
from flowcast.cast.names import MAX_RECIPIENTS, MAX_SEGMENTS, MAX_SPLIT, CastNameError, estate_of, inside, matches, split_takes
from flowcast.routing import Refused

__all__ = [
    "PUB", "PUBACK", "SUB", "UNSUB", "SUBOK", "BATCH", "CURSOR", "GAP",
    "MAX_PATTERN", "MAX_SEGMENTS", "MAX_SUBS", "MAX_LEASE", "MAX_MESSAGE", "MAX_RECIPIENTS", "MAX_SPLIT", "WINDOW", "WINDOW_BYTES",
    "Sub", "Pub", "Batch", "read_sub", "read_unsub", "read_cursor", "read_pub", "read_subok", "read_batch", "read_gap",
    "read_puback", "check_name", "check_pattern", "matches", "inside", "split_takes", "estate_of",
]

PUB, PUBACK, SUB, UNSUB = "cast.pub", "cast.puback", "cast.sub", "cast.unsub"
SUBOK, BATCH, CURSOR, GAP = "cast.subok", "cast.batch", "cast.cursor", "cast.gap"

MAX_PATTERN = 256
MAX_SUBS = 64
MAX_MESSAGE = 256 << 10
WINDOW = 2000
WINDOW_BYTES = 1 << 20
#: The longest lease a cast.sub may ask and a cast.subok grant: an hour.  The one bound for
#: leases -- a layout's ``cast: lease`` is checked against it when it is loaded -- because a
#: subscriber that vanished holds its publisher's window (and the forwarding of its stream) until
#: its lease runs out, and an hour of that is already plenty; a live subscriber renews every lease/3.
MAX_LEASE = 3600.0
_SEQ_MAX = (1 << 63) - 1


class Sub(NamedTuple):
    sid: bytes
    pattern: str
    cursor: int
    lease: float
    split: tuple[str, int, int] | None
    ask: int | None = None  # counts the subscriber's explicit resend requests; a plain renew repeats it


class Pub(NamedTuple):
    id: bytes | None
    name: str
    publisher: str
    recipients: tuple[str, ...] | None
    data: Any


class Batch(NamedTuple):
    sid: bytes
    after: int
    upto: int
    msgs: list  # [[seq, id, name, publisher, stamp, data], ...], checked


def _bad(reason: str, kind: str = "cast_malformed") -> Refused:
    return Refused(reason, kind)


def _map(data: Any, tag: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise _bad(f"{tag}: data is a map, not {type(data).__name__}")
    missing = [key for key in keys if key not in data]
    if missing:
        raise _bad(f"{tag}: field {missing[0]!r} is missing")
    extra = [key for key in data if key not in keys and key not in optional]
    if extra:
        raise _bad(f"{tag}: unknown field {str(extra[0])[:40]!r}")
    return data


def _bytes16(value: Any, tag: str, field: str) -> bytes:
    if value.__class__ is not bytes or len(value) != 16:
        raise _bad(f"{tag}: {field} is 16 bytes")
    return value


def _seq(value: Any, tag: str, field: str) -> int:
    if value.__class__ is not int or not 0 <= value <= _SEQ_MAX:
        raise _bad(f"{tag}: {field} is a whole number >= 0")
    return value


def _checked(check: Any, value: Any, kind: str) -> Any:
    """``check(value)`` from flowcast.cast.names, its CastNameError as a routed refusal of ``kind``."""
    if value.__class__ is str and len(value.encode()) > MAX_PATTERN:
        raise _bad(f"{value[:60]!r} is over {MAX_PATTERN} bytes", "too_large")
    try:
        return check(value)
    except CastNameError as error:
        raise _bad(str(error), error.reason if error.reason != "bad_name" else kind) from None


def check_name(name: Any) -> str:
    """A publishable name; Refused (``bad_name``) saying which part is wrong."""
    return _checked(names.check_name, name, "bad_name")


def check_pattern(pattern: Any) -> str:
    """A subscribable pattern: ``*`` is one segment, a last ``**`` one or more."""
    return _checked(names.check_pattern, pattern, "bad_pattern")


def _split(value: Any) -> tuple[str, int, int] | None:
    return _checked(names.check_split, value, "bad_split")


def read_sub(data: Any) -> Sub:
    d = _map(data, SUB, ("sid", "pattern", "cursor", "lease"), ("split", "ask"))
    lease = d["lease"]
    if lease.__class__ not in (int, float) or not 0 < lease <= MAX_LEASE:
        raise _bad(f"cast.sub: lease is seconds, more than 0 and at most {MAX_LEASE:g}")
    ask = d.get("ask")
    return Sub(_bytes16(d["sid"], SUB, "sid"), check_pattern(d["pattern"]), _seq(d["cursor"], SUB, "cursor"), float(lease),
               _split(d.get("split")), None if ask is None else _seq(ask, SUB, "ask"))


def read_unsub(data: Any) -> bytes:
    return _bytes16(_map(data, UNSUB, ("sid",))["sid"], UNSUB, "sid")


def read_cursor(data: Any) -> tuple[bytes, int]:
    d = _map(data, CURSOR, ("sid", "cursor"))
    return _bytes16(d["sid"], CURSOR, "sid"), _seq(d["cursor"], CURSOR, "cursor")


def check_recipients(value: Any) -> tuple[str, ...] | None:
    return _checked(names.check_recipients, value, "bad_recipients")


def read_pub(data: Any, estate: str) -> Pub:
    """A publish; ``estate`` is the publishing estate (a name under another prefix is refused)."""
    d = _map(data, PUB, ("name", "data"), ("id", "publisher", "recipients"))
    name = check_name(d["name"])
    if estate_of(name) != estate:
        raise _bad(f"cast.pub: {name[:60]!r} is not under this estate's prefix {estate!r}/", "foreign_prefix")
    id = d.get("id")
    if id is not None:
        _bytes16(id, PUB, "id")
    publisher = d.get("publisher") or ""
    if publisher.__class__ is not str or len(publisher) > 128:
        raise _bad("cast.pub: publisher is text of at most 128 characters")
    body = d["data"]
    if body.__class__ is not bytes:
        raise _bad(f"cast.pub: data is bytes (end to end encrypted, opaque here), not {type(body).__name__}", "bad_data")
    if len(body) > MAX_MESSAGE:
        raise _bad(f"cast.pub: message of {len(body)} bytes is over the {MAX_MESSAGE}-byte limit", "too_large")
    return Pub(id, name, publisher, check_recipients(d.get("recipients")), body)


def read_subok(data: Any) -> tuple[bytes, float, int, int]:
    d = _map(data, SUBOK, ("sid", "lease", "low", "high"))
    lease = d["lease"]
    if lease.__class__ not in (int, float) or not 0 < lease <= MAX_LEASE:
        raise _bad("cast.subok: lease out of range")
    return _bytes16(d["sid"], SUBOK, "sid"), float(lease), _seq(d["low"], SUBOK, "low"), _seq(d["high"], SUBOK, "high")


def read_batch(data: Any) -> Batch:
    d = _map(data, BATCH, ("sid", "after", "upto", "msgs"))
    sid, after, upto = _bytes16(d["sid"], BATCH, "sid"), _seq(d["after"], BATCH, "after"), _seq(d["upto"], BATCH, "upto")
    if upto < after:
        raise _bad("cast.batch: upto is below after")
    msgs = d["msgs"]
    if not isinstance(msgs, (list, tuple)) or len(msgs) > WINDOW:
        raise _bad(f"cast.batch: msgs is a list of at most {WINDOW}")
    last = after
    for msg in msgs:
        if not isinstance(msg, (list, tuple)) or len(msg) != 6:
            raise _bad("cast.batch: a message is [seq, id, name, publisher, stamp, data]")
        seq, id, name, publisher, stamp, body = msg
        if body.__class__ is not bytes:
            raise _bad("cast.batch: a message's data is bytes, as the cache stores it")
        if seq.__class__ is not int or not last < seq <= upto:
            raise _bad("cast.batch: seqs rise strictly within (after, upto]")
        last = seq
        _bytes16(id, BATCH, "id")
        if name.__class__ is not str or publisher.__class__ is not str or stamp.__class__ not in (int, float):
            raise _bad("cast.batch: name and publisher are text, stamp a number")
    return Batch(sid, after, upto, list(msgs))


def read_gap(data: Any) -> tuple[bytes, int, int]:
    d = _map(data, GAP, ("sid", "from", "upto"))
    start, upto = _seq(d["from"], GAP, "from"), _seq(d["upto"], GAP, "upto")
    if upto < start:
        raise _bad("cast.gap: upto is below from")
    return _bytes16(d["sid"], GAP, "sid"), start, upto


def read_puback(data: Any) -> tuple[bytes, int, bool]:
    d = _map(data, PUBACK, ("id", "seq", "duplicate"))
    if d["duplicate"].__class__ is not bool:
        raise _bad("cast.puback: duplicate is true or false")
    return _bytes16(d["id"], PUBACK, "id"), _seq(d["seq"], PUBACK, "seq"), d["duplicate"]
