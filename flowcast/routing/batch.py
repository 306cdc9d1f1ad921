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
counted on its own; the source hears one report for the batch, with the
first reason and ``count``, not one report per message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowcast.routing.handlers import UNSET, Refused, envelope, land
from flowcast.routing.parcel import ParcelError, encode, open_data, open_ext, pack_ext
from flowcast.store.share import QueueShare

__all__ = ["BATCH_KEY", "MAX_BATCH", "BATCH_BYTES", "batch_count", "parcel_count", "send_batch", "land_batch"]

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


def _parcels(pack: Any, values: Sequence[Any]) -> list[tuple[int, bytes]]:
    """``values`` packed as (count, msgpack array) pieces within MAX_BATCH and BATCH_BYTES.

    Packed in one call per piece (a C loop, not a Python one); a piece over
    the byte bound is halved until it fits or is one value.
    """
    out: list[tuple[int, bytes]] = []
    todo = [values[i : i + MAX_BATCH] for i in range(0, len(values), MAX_BATCH)]
    todo.reverse()
    while todo:
        piece = todo.pop()
        packed = pack(piece if type(piece) is list else list(piece))
        if len(packed) > BATCH_BYTES and len(piece) > 1:
            half = len(piece) // 2
            todo.append(piece[half:])
            todo.append(piece[:half])
            continue
        out.append((len(piece), packed))
    return out


def send_batch(router: Any, pair: Any, tag: str, values: Sequence[Any], reliable: bool) -> int:
    """Route ``values`` along ``pair`` as batch parcels; how many are on their way (see Router.send_many)."""
    dst = pair.dst
    if dst.estate == router.estate and (dst.yard == router.yard or (not dst.yard and router.is_manor)):
        # Lands in this house: by reference, one by one, as send() would.
        return sum(router._send_pair(pair, tag, value, reliable, None) for value in values)
    sent = 0
    routed, settled = router.hooks.routed, router.hooks.settled
    stamp = router.now()
    if routed is not None:  # recorded one by one: each message keeps its own id (flowcast.routing.events)
        for value in values:
            routed(pair, tag, stamp, value)
            if settled is not None:
                settled(pair)
    for count, packed in _parcels(router._pack, values):
        if count == 1:  # a single value goes as a plain parcel
            parcel = encode(router._pack, pair.packed, tag, stamp, packed[1:])
        else:
            parcel = encode(router._pack, pair.packed, tag, stamp, packed, pack_ext({BATCH_KEY: count}))
        offset = 4 + int.from_bytes(parcel[:4], "big")
        if router._dispatch(pair, tag, stamp, parcel, offset, UNSET, reliable, count):
            sent += count
    return sent


def open_batch(parcel: Any, offset: int, count: int) -> list[Any]:
    """The values of a batch parcel said to hold ``count``; Refused (malformed) if it does not."""
    try:
        values = open_data(parcel, offset)
    except ParcelError as error:
        raise Refused(f"malformed message ({error})", "malformed") from None
    if values.__class__ is not list or len(values) != count:
        raise Refused(f"malformed message (a batch of {count} that is not an array of {count} values)", "malformed")
    return values


def _plain_queue(router: Any, pair: Any, tag: str) -> Any:
    """The queue share a batch of ``tag`` lands in as data (no handler), or None: land() decides."""
    handler = router._handlers.get(tag)
    if handler is not None and handler.handler is not None:
        return None
    try:
        share = router.store.get(pair.dst.share)
    except ValueError:
        return None
    return share if isinstance(share, QueueShare) else None


def land_batch(router: Any, pair: Any, tag: str, stamp: float, parcel: Any, offset: int, count: int, reliable: bool) -> int:
    """Land each message of a batch in order; how many landed.

    Each message is landed as it would be alone (its tag's handler, or its
    share), with the router's landing hooks around each, so a recorder sees
    every one.  Refused, after the rest landed, says how many did not and
    why the first of them did not.
    """
    values = open_batch(parcel, offset, count)
    # Each is charged as if it had come alone (its header and its share of the data), so a
    # queue's byte budget holds as many messages batched as single: a batch of tiny values
    # must not slip 4,096 envelopes past a budget that counts ~70 bytes a message.
    size = offset + (len(parcel) - offset) // count
    hooks = router.hooks
    landing, landed, heard = hooks.landing, hooks.landed, hooks.refused
    done = 0
    first: Refused | None = None
    queue = _plain_queue(router, pair, tag) if landing is None and landed is None and heard is None else None
    if queue is not None:  # land()'s queue branch, with what is the same for every message done once
        src, dst = pair.src, pair.dst
        push = queue.push
        for value in values:
            try:
                if push(envelope(src, dst, tag, stamp, value), size):
                    done += 1
                    continue
                refused = Refused(queue.full(size), "queue_full")
            except Exception as error:  # noqa: BLE001 - a watcher is user code
                refused = Refused(f"share {dst.share!r} refused the message: {error!r}", "update_failed")
            if first is None:
                first = refused
        values = ()
    for value in values:
        if landing is not None:
            landing(pair, tag, stamp, None, 0, value)
        try:
            land(router, pair, tag, stamp, parcel, offset, value, reliable, size)
        except Refused as refused:
            if heard is not None:
                heard(pair, tag, refused)
            if first is None:
                first = refused
            continue
        if landed is not None:
            landed(pair, tag)
        done += 1
    if first is not None:
        failed = count - done
        refused = Refused(f"{first.reason} ({failed} of a batch of {count} messages)", first.counter, first.hint)
        refused.count = failed
        refused.heard = True
        router.counts["delivered"] += done
        raise refused
    return done
