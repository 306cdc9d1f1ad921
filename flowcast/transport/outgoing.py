"""One message on its way, and the only place its state changes.

A message is queued until it reaches one final state: delivered (the
receiver reported it), failed (``reason`` says why) or sent
(fire-and-forget, or handed to a lane's port).  Roads, lanes, the
link and the router all need to know which, and before this module
each wrote or compared the state number itself, so a new rule (a
delivered message must not fail afterwards and be routed back as an
error) had to be kept in five places.  Here the transitions are methods,
a final state is final, and readers get named properties.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from flowcast.errors import Error

__all__ = ["DELIVERED", "FAILED", "QUEUED", "SENT", "Outgoing", "OutgoingStateError", "deliver_through", "numbered", "settle"]

QUEUED, DELIVERED, FAILED, SENT = 0, 1, 2, 3
_STATE_NAMES = {QUEUED: "queued", DELIVERED: "delivered", FAILED: "failed", SENT: "sent"}


class OutgoingStateError(RuntimeError, Error):
    """A transition out of a final state: a message ends once.

    A bug in a stack, never bad input: a delivered message that failed
    later would route an error for something its receiver already has.
    """


class Outgoing:
    """One message on its way; returned by ``send`` so the caller can watch it.

    ``state`` is ``"queued"`` until the receiver reports delivery
    (``"delivered"``), the message fails (``"failed"``, ``reason`` says why)
    or -- fire-and-forget -- it left in a datagram (``"sent"``).

    Besides what the caller gave (data, stream, flags, timeout, retries,
    burst, remote) the slots are the sending link's books (seq, nseg,
    segsize, marks, next_seg, inflight, deadline, chunk, lost, skip); the
    state and the reason are this module's alone.
    """

    __slots__ = (
        "stream",
        "seq",
        "flags",
        "data",
        "nseg",
        "segsize",
        "marks",
        "next_seg",
        "inflight",
        "deadline",
        "retries",
        "burst",
        "_state",
        "_reason",
        "chunk",
        "lost",
        "skip",
        "remote",
        "timeout",
    )

    def __init__(
        self,
        data: bytes,
        stream: int = 0,
        flags: int = 0,
        timeout: float | None = None,
        retries: int | None = None,
        burst: int = 0,
        remote: Any = None,
    ) -> None:
        self.data = data
        self.stream = stream
        self.flags = flags
        self.timeout = timeout
        self.retries = retries
        self.burst = burst
        self.remote = remote
        self.seq = -1
        self.nseg = 1
        # next_seg, inflight, segsize, marks and chunk are a segmented message's, set when a link
        # takes it; lost is set at a whole message's first loss.  Left unset here: every message
        # a road sends is made here, and each assignment is a few percent of a small one's cost.
        self.deadline: float | None = None
        self._state = QUEUED
        self._reason = ""
        self.skip = False

    # -- reading -------------------------------------------------------------

    @property
    def state(self) -> str:
        return _STATE_NAMES[self._state]

    @property
    def pending(self) -> bool:
        """Still queued: no final state yet."""
        return self._state == QUEUED

    @property
    def done(self) -> bool:
        return self._state != QUEUED

    @property
    def delivered(self) -> bool:
        return self._state == DELIVERED

    @property
    def failed(self) -> bool:
        return self._state == FAILED

    @property
    def sent(self) -> bool:
        """Left without waiting for delivery (fire-and-forget, or a lane's port took it)."""
        return self._state == SENT

    @property
    def reason(self) -> str:
        """Why the message failed ("" unless it did)."""
        return self._reason

    # -- transitions -----------------------------------------------------------

    def deliver(self) -> None:
        """The receiver reported the message delivered."""
        if self._state != QUEUED:
            self._refuse("deliver")
        self._state = DELIVERED

    def fail(self, reason: str) -> None:
        """The message will never be delivered, because of ``reason``."""
        if self._state != QUEUED:
            self._refuse("fail")
        self._state = FAILED
        self._reason = reason

    def mark_sent(self) -> None:
        """The message left and nothing will report on it (fire-and-forget, lane)."""
        if self._state != QUEUED:
            self._refuse("mark sent")
        self._state = SENT

    def _refuse(self, verb: str) -> None:
        raise OutgoingStateError(f"cannot {verb} {self!r}: it is already {self.state}")

    def __repr__(self) -> str:
        reason = " " + self._reason if self._reason else ""
        return f"<Outgoing stream={self.stream} seq={self.seq} {len(self.data)} B {self.state}{reason}>"


_new = object.__new__


def numbered(data: bytes, stream: int, flags: int, timeout: float | None, remote: Any, seq: int, deadline: float | None) -> Outgoing:
    """A new whole reliable message a link has numbered already: what ``Outgoing(...)`` makes, with
    its sequence number and deadline, and without the ``__init__`` call (a road's small send path
    makes one per message, and that call was ~20% of making it)."""
    msg = _new(Outgoing)
    msg.data = data
    msg.stream = stream
    msg.flags = flags
    msg.timeout = timeout
    msg.retries = None
    msg.burst = 0
    msg.remote = remote
    msg.seq = seq
    msg.nseg = 1
    msg.deadline = deadline
    msg._state = QUEUED
    msg._reason = ""
    msg.skip = False
    return msg


def deliver_through(queue: deque[Outgoing], expected: int, completed: Callable[[Outgoing], None] | None) -> int:
    """Deliver the messages at the head of ``queue`` numbered below ``expected``; how many were pending
    (:func:`settle` says how many bytes they were too)."""
    return settle(queue, expected, completed)[0]


def settle(queue: deque[Outgoing], expected: int, completed: Callable[[Outgoing], None] | None) -> tuple[int, int]:
    """Deliver the messages at the head of ``queue`` numbered below ``expected``: how many were
    pending, and their bytes (a link's send queue budget counts them: sender.py).

    A receiver reports delivery by stream (the next sequence number it has not
    delivered), so a sender's ACK settles a run of messages at once.  The
    run is settled here, where the state is written, and inline rather
    than by ``deliver()`` per message: it runs for every message a road
    sends, and a method call per message costs that path a few percent.
    A message already final (failed, its SKIP in its place) is passed over.
    ``completed(msg)`` hears of each one delivered, a SKIP excepted.

    A stream's queue holds its messages numbered one after another (a link
    queues each as it numbers it, and a failed one's SKIP takes its place),
    so the run's length is ``expected`` less the head's number: counted
    once, not compared per message.  Should the queue ever not be so, the
    run is walked message by message instead.
    """
    if not queue:
        return 0, 0
    first = queue[0].seq
    run = expected - first
    if run <= 0:
        return 0, 0
    if run > len(queue):
        run = len(queue)
    if queue[run - 1].seq != first + run - 1:  # not numbered in a row: the careful walk
        return _deliver_walk(queue, expected, completed)
    popleft = queue.popleft
    settled = run
    size = 0
    if completed is None:
        for _ in range(run):
            msg = popleft()
            if msg._state == QUEUED:
                msg._state = DELIVERED
                size += len(msg.data)
            else:
                settled -= 1
        return settled, size
    for _ in range(run):
        msg = popleft()
        if msg._state == QUEUED:
            msg._state = DELIVERED
            size += len(msg.data)
            if not msg.skip:
                completed(msg)
        else:
            settled -= 1
    return settled, size


def _deliver_walk(queue: deque[Outgoing], expected: int, completed: Callable[[Outgoing], None] | None) -> tuple[int, int]:
    count = size = 0
    while queue and queue[0].seq < expected:
        msg = queue.popleft()
        if msg._state == QUEUED:
            msg._state = DELIVERED
            count += 1
            size += len(msg.data)
            if completed is not None and not msg.skip:
                completed(msg)
    return count, size
