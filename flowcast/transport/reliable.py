"""Message transactions over one session: batching, acks, resend, order.

A :class:`Link` turns queued messages into packet *bodies* (sequences of
chunks, wire.py) and bodies back into delivered messages.  It knows nothing
about sockets or crypto: the stack seals each body it builds under the next
packet counter and hands the link every body it opens.  That split is
what lets a Road (sealed UDP, lossy) and a Lane (plain Unix datagrams,
lossless and ordered) share it.

Design, in the spirit of QUIC and SCTP rather than RAET's one transaction
per exchange:

* **Packets are acknowledged, not messages.**  An ACK lists ranges of packet
  counters received; the sender keeps, per packet in flight, which message
  segments it carried.  A packet acknowledged frees them; a packet declared
  lost (three later packets acknowledged, or older than the retransmission
  timeout) puts back exactly its unacknowledged segments -- selective resend
  at no per-message cost.  Resends go in new packets with new counters, so
  there is never a retransmission ambiguity in RTT samples.
* **Delivery is reported by stream.**  Each ACK also carries, per stream, the
  next sequence number the receiver has not yet *delivered*.  A sender marks
  a message delivered only then: an acknowledged packet whose message still
  waits behind a gap is not "delivered" (nothing is reported delivered that
  was not).
* **Many small messages, one packet.**  The builder packs chunks until the
  body is full; the stack seals each body with one AEAD call.
* **Flow control.**  The receiver advertises a window (bytes it can still
  hold); the sender keeps bytes in flight under min(window, cwnd), and cwnd
  halves once per loss episode (AIMD), so a burst cannot bury the receiver
  or a lossy path.
* **Per-message reliability.**  ``timeout`` (deadline), ``retries`` (resends
  of any one segment), ``burst`` (segments of this message in flight) or
  fire-and-forget (``reliable=False``: sent once, delivered on arrival,
  never ordered).  A reliable message that fails is replaced on the wire by
  a SKIP chunk so the receiver's stream moves on instead of waiting forever.

The work is split by role, each part in its own module and owning its
own state: sender.py (queueing, segmentation, packets, acknowledgements
in), receiver.py (order, reassembly, what is held, ACKs owed) and
recovery.py (RTT, congestion window, back-off, timers).  ``Link`` here
is the thin facade that joins them.  The parts are mixins of one object
rather than three objects because the per-datagram path crosses them
(an ACK chunk read by the receiver frees the sender's packets and grows
recovery's window): an attribute read through a second object would be
paid on every packet.  A message's state is outgoing.py's alone.
"""


from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowcast.transport import budget as _budget
from flowcast.transport.outgoing import DELIVERED, FAILED, QUEUED, SENT, Outgoing
from flowcast.transport.receiver import ACK_DELAY, MAX_AHEAD, MIN_PIECE, RECEIVER_SLOTS, Receiver
from flowcast.transport.recovery import INITIAL_RTO, MAX_RTO, MIN_CWND, MIN_RTO, RECOVERY_SLOTS, Recovery
from flowcast.transport.sender import MAX_INFLIGHT_PACKETS, REORDER_THRESHOLD, SENDER_SLOTS, Sender

__all__ = [
    "ACK_DELAY",
    "DELIVERED",
    "FAILED",
    "INITIAL_RTO",
    "MAX_AHEAD",
    "MAX_INFLIGHT_PACKETS",
    "MAX_RTO",
    "MIN_CWND",
    "MIN_PIECE",
    "MIN_RTO",
    "QUEUED",
    "REORDER_THRESHOLD",
    "SENT",
    "Link",
    "Outgoing",
]


class Link(Sender, Receiver, Recovery):
    """Sender and receiver halves of message transactions for one session.

    ``deliver(stream, flags, payload)`` is called for every message in order;
    ``completed(outgoing)`` for every message that reaches a final state.
    ``held()`` says how many delivered bytes the application has not yet
    taken (it shrinks the advertised window).  With ``acks=False`` (a lane)
    the transport is trusted to be lossless and ordered: nothing is
    acknowledged, and a message counts as delivered once it is handed over.
    """

    # One per session: slots, not a ~1.6 KB instance dict per remote.  Each
    # part names its own (a mixin with slots of its own could not be mixed
    # with another); these few all parts read.
    __slots__ = ("__weakref__", "acks", "completed", "counts", "max_body", "max_message", "watch") + SENDER_SLOTS + RECEIVER_SLOTS + RECOVERY_SLOTS

    def __init__(
        self,
        max_body: int,
        deliver: Callable[[int, int, bytes], None],
        completed: Callable[[Outgoing], None] | None = None,
        *,
        held: Callable[[], int] | None = None,
        acks: bool = True,
        adopt: bool = False,
        receive_window: int = 8 << 20,
        max_message: int = (64 << 20) + (1 << 16),
        max_cwnd: int = 16 << 20,
        now: float = 0.0,
        budget: _budget.HoldBudget | None = None,
    ) -> None:
        if max_body < 256:
            raise ValueError("max_body too small")
        self.max_body = max_body
        self.completed = completed
        self.acks = acks
        self.max_message = max_message
        self.counts: dict[str, int] = {"resent": 0, "lost_packets": 0, "duplicates": 0, "refused": 0, "failed": 0}
        #: A ``stack.LinkEvents`` while the stack records message events; None
        #: (the default) costs one local test per chunk received, nothing more.
        self.watch: Any = None
        self._init_sender(max_body)
        self._init_receiver(deliver, held, adopt, receive_window, max_message, budget)
        self._init_recovery(max_cwnd, now)
