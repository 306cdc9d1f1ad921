"""Stock behaviours every house has (the ``flowcast.behaviours`` entry point).

Small, general pieces that flows use as glue.  Transport wiring behaviours
(roads, lanes, routers) are added by their layers.
"""

from __future__ import annotations


from flowcast.behaving.registry import Io, behaviour
from flowcast.store.sizes import estimate


@behaviour("count")
def count(io: Io, step: float = 1) -> None:
    """Add ``step`` to the output share's value each time it runs."""
    share = io.output
    if share is None:
        raise ValueError("count needs an output share: 'do count to SHARE'")
    share.update(value=(share.get("value") or 0) + step)


@behaviour("forward")
def forward(io: Io) -> None:
    """Move every message from the input queue share to the output queue share.

    Each message carries the bytes it was counted at over to the output's
    byte budget (or, from a queue without one, an estimate of them): pushed
    as 0 bytes, a forwarded flood would never meet that budget.
    """
    source, target = io.input, io.output
    queue = getattr(source, "queue", None)
    if queue is None or not hasattr(target, "push"):
        raise ValueError("forward needs queue shares: 'do forward from Q1 to Q2'")
    take = getattr(source, "take", None)
    if take is None or not getattr(target, "budget", 0):
        while queue:
            target.push(queue.popleft())
        return
    while queue:
        message, size = take()
        target.push(message, estimate(message) if size is None else size)


@behaviour("mirror")
def mirror(io: Io) -> None:
    """Copy the input share's fields onto the output share."""
    if io.input is None or io.output is None:
        raise ValueError("mirror needs 'from SHARE to SHARE'")
    io.output.update(io.input.fields())




@behaviour("show")
def show(io: Io, label: str = "") -> None:
    """Print the input shares' fields, one line each: what a house's log is for."""
    if not io.inputs:
        raise ValueError("show needs 'from SHARE'")
    prefix = f"{label}: " if label else ""
    for share in io.inputs:
        fields = " ".join(f"{key}={value!r}" for key, value in share.fields().items())
        print(f"{prefix}{share.name} {fields}", flush=True)


#: Default byte budget of a declared queue: 10,000 messages of ~3 KiB, or 32 of 1 MiB.
QUEUE_BUDGET = 32 << 20


@behaviour("queue")
class Queue:
    """Declare the ``to`` shares queue shares: ``do queue to inbox with bound 1000 at enter``.

    Routed messages land in a queue share as whole messages, one item each
    (a value share would keep only the last).  ``bound`` (default 10,000
    messages) and ``bytes`` (default 32 MiB, counted as the messages came on
    the wire) turn a flood into counted drops and ``queue_full`` errors back
    to the senders; 0 for none.  Both are needed: a count alone lets 10,000
    large messages pin gigabytes.  The work happens when the flow is built;
    running the act does nothing.
    """

    def __init__(self, io: Io, bound: int = 10_000, bytes: int = QUEUE_BUDGET) -> None:  # noqa: A002 - the flow's word
        if not io.outputs:
            raise ValueError("queue needs 'to SHARE'")
        if isinstance(bytes, float) and bytes.is_integer():
            bytes = int(bytes)
        if bytes.__class__ is not int or bytes < 0:
            raise ValueError(f"queue: bytes must be a whole number of bytes, 0 for no budget, not {bytes!r}")
        for share in io.outputs:
            io.store.queue(share.name, bound, bytes)

    def __call__(self) -> None:
        return None
