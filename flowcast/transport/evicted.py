"""EVICTED notices: a receiver that dropped acknowledged pieces of a message tells its sender.

The hold budget (budget.py) may drop what a link holds for order or
reassembly -- pieces the sender already saw acknowledged and will never
send again.  Without a word the sender would wait for that message until
its timeout, and with ``timeout=None`` forever, and the rest of its stream
behind it.  So the receiver owes an ``EVICTED`` chunk (stream, seq) for each
reliable message it dropped; it rides on every ACK until the stream has
moved past that seq.  The sender fails the message at once with reason
``evicted`` (the router routes an error back) and, as for any failed
message, sends a SKIP in its place: the receiver's stream moves on, and the
notice is no longer owed.  A notice for a message the sender no longer
has (delivered, failed, never sent) changes nothing.
"""

from __future__ import annotations

from typing import Any

from flowcast.transport.wire import EVICT, ChunkKind

__all__ = ["EVICTED", "note", "chunks", "heard"]

#: The reason of a message failed because its receiver evicted acknowledged pieces of it.
EVICTED = "evicted"
#: Notices one packet carries at most (12 bytes each): the rest go with the next ACKs.
PER_PACKET = 8
#: Notices one link owes at most.  A peer that never sends the SKIPs
#: (an attacker's injected pieces) would otherwise grow them with every
#: eviction; past the bound the oldest is forgotten (counted
#: ``evicted_unnoticed``): its sender, if honest, fails it by its timeout.
MAX_OWED = 256
_KIND = ChunkKind.EVICTED
_pack = EVICT.pack


def note(link: Any, stream: int, seq: int) -> None:
    """``link`` (the receiver) dropped reliable message ``seq`` of ``stream``: owe its sender a notice."""
    if not link.acks:
        return  # no acknowledgements, no sender waiting on them
    owed = link.evicted_owed
    if owed is None:
        owed = link.evicted_owed = {}
    owed[(stream, seq)] = None
    if len(owed) > MAX_OWED:
        del owed[next(iter(owed))]
        link.counts["evicted_unnoticed"] = link.counts.get("evicted_unnoticed", 0) + 1
    link.ack_owed = True


def chunks(link: Any, room: int) -> bytes:
    """The notices still owed that fit in ``room`` bytes; those the stream moved past are forgotten."""
    owed = link.evicted_owed
    streams = link.streams_in
    out = []
    for key in list(owed):
        stream, seq = key
        state = streams.get(stream)
        if state is None or state.expected > seq:
            del owed[key]  # delivered past (the sender's SKIP came): nothing to say
            continue
        if len(out) >= PER_PACKET or (len(out) + 1) * EVICT.size > room:
            break
        out.append(_pack(_KIND, 0, stream, seq))
    if not owed:
        link.evicted_owed = None
    return b"".join(out)


def heard(link: Any, stream: int, seq: int) -> None:
    """The peer evicted ``seq`` of ``stream``: fail that message now if it is still ours and waiting."""
    queue = link.unfinished.get(stream)
    if not queue:
        return
    for msg in queue:
        if msg.seq == seq:
            if not msg.skip:
                link.counts["evicted_by_peer"] = link.counts.get("evicted_by_peer", 0) + 1
                link.fail(msg, EVICTED)
            return
        if msg.seq > seq:
            return
