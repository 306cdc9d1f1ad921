"""Batches: many messages of one route pair in one parcel.

A flow that drains a queue (``route send`` of a queue share) sends many
messages along one pair at once.  Sent one parcel each, every message pays
every hop's per-message cost -- a transport message, a header read, a policy
check, a lane or road send -- in each of the four houses between two shares
of two estates.  Sent as one *batch parcel*, the hops in between pay once
per batch: a manor reads one header, checks one policy decision (the pair,
tag and source are the same for all of them, so one decision is the same
decision), and forwards the bytes as they came.  Only the house the batch
lands in unpacks it, and it lands each message on its own, in order: a
queue share gets every one, a watcher sees every one, nothing is coalesced.

On the wire a batch is an ordinary parcel (flowcast.routing.parcel) whose
header extensions carry ``batch: N`` (an int, 2 to MAX_BATCH) and whose data
is a msgpack array of exactly N values.  All of them share the header's
tag and stamp (they were sent in one go).  A parcel that says ``batch`` and
is not such an array is ``malformed`` and refused whole.

What a refusal says: a batch refused on the way (no road, the estate never
joined, the transport gave up) is refused whole, and the one ``error``
report back carries ``count``, the messages it stood for.  At the landing,
each message that does not land (a full queue, a watcher that raised) is
counted as its own kind; the source hears one report for the batch, with
the first reason and ``count``, not one report per message.

What is never batched (send_batch): messages that land in the sending
house, tags with a handler, and anything while a recorder listens.  A
batch says how many messages it is, so every count that trusts it is
checked first: against the array's header on the way (check_array), in
full where it lands (open_batch).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgpack

from flowcast.routing.handlers import UNSET, Refused, envelope, land, push_into
from flowcast.routing.parcel import ParcelError, encode, open_data, open_ext, pack_ext
from flowcast.store.share import QueueShare
from flowcast.transport.wire import array_header, walk_untrusted

__all__ = ["BATCH_KEY", "MAX_BATCH", "BATCH_BYTES", "batch_count", "check_array", "open_batch", "parcel_count", "send_batch", "land_batch"]

#: The header extension that makes a parcel a batch.
BATCH_KEY = "batch"
#: Messages in one batch parcel at most.
MAX_BATCH = 4096
#: Packed data of one batch parcel at most (more values go in further
#: parcels): one loopback datagram, a few dozen between hosts, and a small
#: share of any queue's byte budget.
BATCH_BYTES = 48 << 10


def batch_count(ext: Any) -> int:
    """The messages a parcel with the extension map ``ext`` stands for; ParcelError if ``batch`` is wrong."""
    n = ext.get(BATCH_KEY, 1)
    if n.__class__ is not int or not 1 < n <= MAX_BATCH:
        raise ParcelError(f"header extension {BATCH_KEY!r} is a count of 2 to {MAX_BATCH} messages")
    return n


def parcel_count(parcel: Any) -> int:
    """The messages ``parcel`` stands for (1 unless it is a well-formed batch); for reports only."""
    try:
        return batch_count(open_ext(parcel)) if len(parcel) > 4 and parcel[4] == 0x95 else 1
    except Exception:  # noqa: BLE001 - a parcel that cannot be read stands for one message
        return 1


def _parcels(pack: Any, values: list[Any]) -> tuple[list[tuple[list[Any], bytes]], list[tuple[Any, Exception]]]:
    """``values`` packed as (values, msgpack array) pieces within MAX_BATCH and BATCH_BYTES, in order,
    and the values that cannot be packed (with why).

    Packed in one call per piece (a C loop, not a Python one).  A piece over
    the byte bound, or one that does not pack, is halved until it fits or is
    one value: a value msgpack refuses costs log2(n) tries, not the batch.
    """
    out: list[tuple[list[Any], bytes]] = []
    bad: list[tuple[Any, Exception]] = []
    todo = [values[i : i + MAX_BATCH] for i in range(0, len(values), MAX_BATCH)]
    todo.reverse()
    while todo:
        piece = todo.pop()
        try:
            packed = pack(piece)
        except Exception as error:  # noqa: BLE001 - TypeError, OverflowError, ValueError, RecursionError...
            if len(piece) == 1:
                bad.append((piece[0], error))
                continue
            packed = b""
        if (not packed or len(packed) > BATCH_BYTES) and len(piece) > 1:
            half = len(piece) // 2
            todo.append(piece[half:])
            todo.append(piece[:half])
            continue
        out.append((piece, packed))
    return out, bad


def send_batch(router: Any, pair: Any, tag: str, values: list[Any], reliable: bool) -> int:
    """Route ``values`` along ``pair``, as batch parcels where it may; how many are on their way
    (see Router.send_many).

    One by one instead: within this house (by reference, as ``send``), for a
    tag with a handler (a batch of them is refused where it lands: a read
    or a subscription answered per message would let one small parcel ask
    for thousands of answers), and while a recorder listens (each message
    keeps its own id, routed to refused).  A value msgpack cannot pack is
    refused on its own (``unpackable``, reported to ``SRC.error``) and the
    rest go: raising would lose the queue a ``route send`` just drained.
    """
    dst = pair.dst
    if dst.estate == router.estate and (dst.yard == router.yard or (not dst.yard and router.is_manor)):
        return sum(router._send_pair(pair, tag, value, reliable, None) for value in values)
    pieces, bad = _parcels(router._pack, values)
    for value, error in bad:
        refused = Refused(f"data cannot be packed ({type(error).__name__}: {str(error)[:120]})", "unpackable")
        router._refuse(pair, tag, refused)
    handler = router._handlers.get(tag)
    if (handler is not None and handler.handler is not None) or router.hooks.routed is not None:
        return sum(router._send_pair(pair, tag, value, reliable, None) for piece, _ in pieces for value in piece)
    sent = 0
    stamp = router.now()
    for piece, packed in pieces:
        count = len(piece)
        if count == 1:  # a single value goes as a plain parcel
            parcel = encode(router._pack, pair.packed, tag, stamp, packed[1:])
        else:
            parcel = encode(router._pack, pair.packed, tag, stamp, packed, pack_ext({BATCH_KEY: count}))
        offset = 4 + int.from_bytes(parcel[:4], "big")
        if router._dispatch(pair, tag, stamp, parcel, offset, UNSET, reliable, count):
            sent += count
    return sent


def check_array(parcel: Any, offset: int, count: int) -> None:
    """ParcelError unless the data of a batch parcel starts as an array of ``count`` values and has a
    byte for each: read where a batch is counted or refused on the way, without decoding its data,
    so a small parcel cannot claim thousands of messages to inflate a router's counts."""
    try:
        n, start = array_header(parcel, offset)
    except ValueError:
        raise ParcelError("a batch's data is not an array") from None
    if n != count or len(parcel) - start < count:
        raise ParcelError(f"a batch of {count} whose data is not an array of {count} values")


def open_batch(parcel: Any, offset: int, count: int, sized: bool) -> tuple[list[Any], list[int] | None]:
    """The values of a batch parcel said to hold ``count``, and when ``sized`` each one's packed
    size (a queue with a byte budget charges it); Refused (malformed) if it is not such a batch."""
    if not sized:
        try:
            values = open_data(parcel, offset)
        except ParcelError as error:
            raise Refused(f"malformed message ({error})", "malformed") from None
        if values.__class__ is not list or len(values) != count:
            raise Refused(f"malformed message (a batch of {count} that is not an array of {count} values)", "malformed")
        return values, None
    data = memoryview(parcel)[offset:]
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    values, sizes = [], []
    try:
        walk_untrusted(data)  # another estate's bytes, read value by value: see wire.unpack_untrusted
        if unpacker.read_array_header() != count:
            raise ValueError("not an array of its count")
        last = unpacker.tell()
        for _ in range(count):
            values.append(unpacker.unpack())
            at = unpacker.tell()
            sizes.append(at - last)
            last = at
        if last != len(data):
            raise ValueError("bytes after its values")
    except Exception as error:  # noqa: BLE001 - whatever the data does, the batch is malformed
        raise Refused(f"malformed message (a batch of {count}: {type(error).__name__})", "malformed") from None
    return values, sizes


def land_batch(router: Any, pair: Any, tag: str, stamp: float, parcel: Any, offset: int, count: int, reliable: bool) -> int:
    """Land each message of a batch in order; how many landed.

    Each message is landed as it would be alone (into its share), with the
    router's landing hooks around each, so a recorder sees every one, and
    charged to a queue's byte budget what it would cost alone (the header
    and its own packed data).  Refused, after the rest landed, says how
    many did not and why the first did not; refusals of other kinds are
    counted as themselves.  A tag with a handler here is never batched:
    the whole batch is refused (``unbatchable``), see send_batch.
    """
    handler = router._handlers.get(tag)
    if handler is not None and handler.handler is not None:
        raise Refused(f"a batch of tag {tag!r}, which has a handler here: such messages come one by one", "unbatchable")
    try:
        share = router.store.get(pair.dst.share)
    except ValueError:
        share = None
    queue = share if isinstance(share, QueueShare) else None
    values, sizes = open_batch(parcel, offset, count, queue is not None and bool(queue.budget))
    hooks = router.hooks
    landing, landed, heard = hooks.landing, hooks.landed, hooks.refused
    failed: Counter[str] = Counter()
    firsts: dict[str, Refused] = {}
    if queue is not None and landing is None and landed is None and heard is None:
        # land()'s queue branch, with what is the same for every message done once
        src, dst = pair.src, pair.dst
        for i, value in enumerate(values):
            try:
                push_into(queue, envelope(src, dst, tag, stamp, value), offset if sizes is None else offset + sizes[i], dst.share)
            except Refused as refused:
                failed[refused.counter] += 1
                firsts.setdefault(refused.counter, refused)
    else:
        for i, value in enumerate(values):
            if landing is not None:
                landing(pair, tag, stamp, None, 0, value)
            try:
                land(router, pair, tag, stamp, parcel, offset, value, reliable, offset if sizes is None else offset + sizes[i])
            except Refused as refused:
                if heard is not None:
                    heard(pair, tag, refused)
                failed[refused.counter] += 1
                firsts.setdefault(refused.counter, refused)
                continue
            if landed is not None:
                landed(pair, tag)
    done = count - sum(failed.values())
    if not failed:
        return done
    router.counts["delivered"] += done
    pair.count += done
    kinds = list(firsts)
    for kind in kinds[1:]:  # counted as themselves; the source hears of the first kind
        router.counts[kind] += failed[kind]
        router.denials.note(kind, firsts[kind].reason, pair.src, pair.dst, tag)
    first = firsts[kinds[0]]
    also = f"; {sum(failed[k] for k in kinds[1:])} more: " + ", ".join(kinds[1:]) if len(kinds) > 1 else ""
    refused = Refused(f"{first.reason} ({failed[first.counter]} of a batch of {count} messages{also})", first.counter, first.hint)
    refused.count = failed[first.counter]
    refused.heard = True
    raise refused
