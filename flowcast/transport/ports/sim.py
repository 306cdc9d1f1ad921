"""A simulated datagram network on the scheduler's clock.

Why it exists: reliability code is only as good as the faults it has met.
Here every fault a real network commits -- loss, duplication, reordering,
delay, bit flips, partitions, a receiver whose buffer overflows -- happens
on purpose, at rates the test chooses, and *repeatably*: all randomness
comes from one seeded :class:`random.Random` consumed in send order, and all
deliveries are scheduler timers.  With a
:class:`~flowcast.runtime.clock.VirtualClock` a whole multi-estate run
takes milliseconds and the same seed gives the same sequence of deliveries.

Model, per datagram sent from ``a`` to ``b`` under the conditions of that
link (the network's defaults unless :meth:`SimNetwork.link` overrode them):

1. dropped if a partition separates ``a`` and ``b`` (``partitioned``);
2. lost with probability ``loss``;
3. corrupted with probability ``corrupt`` (1-3 distinct bits flipped);
4. duplicated with probability ``duplicate`` (a second, independent copy);
5. each copy is delayed uniformly within ``delay = (min, max)`` seconds, and
   links are FIFO: a copy never overtakes one sent before it -- unless it is
   *reordered* (probability ``reorder``), which holds it back by a further
   random ``0 < extra <= reorder_window`` and lets later datagrams pass;
6. on arrival it is dropped if a partition now separates the two ends, if
   no open port has that name (``unroutable``), or if the receiver's queue
   is full (``overflow``, like a socket buffer).

Steps 2-5 are :class:`~flowcast.transport.ports.faults.Impairer`'s, shared
with the chaos relay.

Counts of each event are in :attr:`SimNetwork.counts`.
"""

from __future__ import annotations

import errno
import random
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace
from typing import Any

from flowcast.transport.port import Address
from flowcast.transport.ports.faults import Conditions, Impairer, delay_pair

__all__ = ["Conditions", "SimNetwork", "SimPort"]


class SimNetwork:
    """A seeded network of named :class:`SimPort` endpoints.

    ``delay`` is seconds, a number or ``(min, max)``.  ``reorder_window``
    defaults to twice the largest delay (at least 1 ms), so a reordered
    datagram really does fall behind later ones.  ``queue_limit`` and
    ``queue_bytes`` bound each port's receive queue.
    """

    def __init__(
        self,
        scheduler: Any,
        seed: int | str | bytes = 0,
        *,
        loss: float = 0.0,
        duplicate: float = 0.0,
        reorder: float = 0.0,
        delay: float | tuple[float, float] = (0.0, 0.0),
        corrupt: float = 0.0,
        reorder_window: float | None = None,
        queue_limit: int = 4096,
        queue_bytes: int = 8 * 1024 * 1024,
        max_datagram: int = 65507,
        record: bool = False,
    ) -> None:
        pair = delay_pair(delay)
        window = reorder_window if reorder_window is not None else max(0.001, 2.0 * pair[1])
        self.defaults = Conditions(loss, duplicate, reorder, pair, corrupt, window)
        self.scheduler = scheduler
        self.random = random.Random(seed)
        self.queue_limit = queue_limit
        self.queue_bytes = queue_bytes
        self.max_datagram = max_datagram
        #: Events: ``sent``, ``delivered``, ``lost``, ``duplicated``,
        #: ``reordered``, ``corrupted``, ``partitioned``, ``unroutable``,
        #: ``overflow``.
        self.counts: Counter[str] = Counter()
        #: With ``record=True``: ``(time, source, destination, data)`` per
        #: datagram put in a receive queue, in delivery order.
        self.trace: list[tuple[float, Address, Address, bytes]] | None = [] if record else None
        self._ports: dict[Address, SimPort] = {}
        self._links: dict[tuple[Address, Address], Conditions] = {}
        self._impair = Impairer(self.random, self.counts)
        self._cuts: list[dict[Address, int]] = []

    # -- topology ------------------------------------------------------------

    def port(self, name: Hashable) -> "SimPort":
        """Open the port called ``name``; its address is ``name``."""
        existing = self._ports.get(name)
        if existing is not None and not existing.closed:
            raise ValueError(f"simulated port {name!r} is already open")
        port = SimPort(self, name)
        self._ports[name] = port
        return port

    def link(self, a: Hashable, b: Hashable, *, both: bool = True, **changes: Any) -> None:
        """Change the conditions from ``a`` to ``b`` (and back, unless ``both=False``).

        Keywords are :class:`Conditions` fields; ``delay`` may be a number.
        Unnamed fields keep the link's current values.
        """
        if "delay" in changes:
            changes["delay"] = delay_pair(changes["delay"])
        pairs = [(a, b), (b, a)] if both else [(a, b)]
        for pair in pairs:
            self._links[pair] = replace(self._links.get(pair, self.defaults), **changes)

    def conditions(self, a: Hashable, b: Hashable) -> Conditions:
        """What a datagram from ``a`` to ``b`` meets now."""
        return self._links.get((a, b), self.defaults)

    def partition(self, *groups: Iterable[Hashable]) -> None:
        """Cut the network between ``groups``: no datagram crosses from one to another.

        Ports in no group are unaffected.  Cuts add up until :meth:`heal`.
        Datagrams already in flight across a new cut are lost.
        """
        side: dict[Address, int] = {}
        for index, group in enumerate(groups):
            for name in group:
                if name in side and side[name] != index:
                    raise ValueError(f"{name!r} is in two groups of one partition")
                side[name] = index
        self._cuts.append(side)

    def heal(self) -> None:
        """Remove every partition."""
        self._cuts.clear()

    def separated(self, a: Hashable, b: Hashable) -> bool:
        for side in self._cuts:
            sa = side.get(a)
            if sa is not None:
                sb = side.get(b)
                if sb is not None and sa != sb:
                    return True
        return False

    # -- moving datagrams ------------------------------------------------------

    def _send(self, data: bytes, source: Address, destination: Address) -> None:
        self.counts["sent"] += 1
        if self._cuts and self.separated(source, destination):
            self.counts["partitioned"] += 1
            return
        cond = self._links.get((source, destination), self.defaults)
        now = self.scheduler.clock.now()
        call_at = self.scheduler.call_at
        for when, copy in self._impair(cond, data, now, (source, destination)):
            call_at(when, self._arrive, copy, source, destination)

    def _arrive(self, data: bytes, source: Address, destination: Address) -> None:
        if self._cuts and self.separated(source, destination):
            self.counts["partitioned"] += 1
            return
        port = self._ports.get(destination)
        if port is None or port.closed:
            self.counts["unroutable"] += 1
            return
        if port._enqueue(data, source):
            self.counts["delivered"] += 1
            if self.trace is not None:
                self.trace.append((self.scheduler.clock.now(), source, destination, data))
        else:
            self.counts["overflow"] += 1

    def _forget(self, port: "SimPort") -> None:
        if self._ports.get(port.address) is port:
            del self._ports[port.address]


class SimPort:
    """One endpoint of a :class:`SimNetwork`; made by :meth:`SimNetwork.port`.

    Sending never blocks, so ``send`` is always True and ``on_writable``
    fires at the current time -- once, as the contract says.  Readability
    is level-triggered like a selector's: after the callback runs, if
    datagrams are still queued it runs again in the next scheduler round,
    never in a tight loop that would starve micro-threads.
    """

    def __init__(self, network: SimNetwork, name: Address) -> None:
        self._network = network
        self._scheduler = network.scheduler
        self._name = name
        self._queue: deque[tuple[bytes, Address]] = deque()
        self._queued_bytes = 0
        self._readable: Callable[[], None] | None = None
        self._notifying = False
        self._writable_timer: Any = None
        self._closed = False
        #: ``sent``, ``received``, ``overflow`` (dropped: my queue was full).
        self.counts: Counter[str] = Counter()

    @property
    def address(self) -> Address:
        return self._name

    @property
    def max_datagram(self) -> int:
        return self._network.max_datagram

    @property
    def network(self) -> SimNetwork:
        return self._network

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> int:
        """Datagrams waiting in the receive queue."""
        return len(self._queue)

    def send(self, data: bytes, address: Address) -> bool:
        if self._closed:
            raise OSError(errno.EBADF, "simulated port is closed")
        if len(data) > self._network.max_datagram:
            raise ValueError(
                f"datagram of {len(data)} bytes is larger than this port carries ({self._network.max_datagram})"
            )
        self.counts["sent"] += 1
        # Copy: a caller may reuse its buffer, as it may after a real sendto.
        self._network._send(bytes(data), self._name, address)
        return True

    def send_segments(self, data: bytes, segment: int, address: Address) -> int:
        """Send ``data`` as datagrams of ``segment`` bytes, like the socket
        ports; the network treats each on its own, as a real one would."""
        if not 0 < segment <= self._network.max_datagram:
            raise ValueError(f"segment size must be 1..{self._network.max_datagram}, got {segment}")
        sent = 0
        for offset in range(0, len(data), segment):
            self.send(data[offset : offset + segment], address)
            sent += 1
        return sent

    def receive(self) -> tuple[bytes, Address] | None:
        if not self._queue:
            return None
        item = self._queue.popleft()
        self._queued_bytes -= len(item[0])
        self.counts["received"] += 1
        return item

    def receive_many(self, limit: int) -> list[tuple[bytes, Address]]:
        queue = self._queue
        count = min(limit, len(queue))
        if count <= 0:
            return []
        out = [queue.popleft() for _ in range(count)]
        self._queued_bytes -= sum(len(d) for d, _ in out)
        self.counts["received"] += count
        return out

    def on_readable(self, callback: Callable[[], None] | None) -> None:
        self._readable = None if self._closed else callback
        if self._readable is not None and self._queue:
            self._notify_soon()

    def on_writable(self, callback: Callable[[], None] | None) -> None:
        if self._writable_timer is not None:
            self._writable_timer.cancel()
            self._writable_timer = None
        if callback is None or self._closed:
            return
        scheduler = self._scheduler

        def fire() -> None:
            self._writable_timer = None
            callback()

        self._writable_timer = scheduler.call_at(scheduler.clock.now(), fire)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._readable = None
        self.on_writable(None)
        self._queue.clear()
        self._queued_bytes = 0
        self._network._forget(self)

    def __enter__(self) -> "SimPort":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<SimPort {self._name!r}{state}>"

    # -- network side --------------------------------------------------------

    def _enqueue(self, data: bytes, source: Address) -> bool:
        network = self._network
        if len(self._queue) >= network.queue_limit or self._queued_bytes + len(data) > network.queue_bytes:
            self.counts["overflow"] += 1
            return False
        self._queue.append((data, source))
        self._queued_bytes += len(data)
        if self._readable is not None:
            self._notify_soon()
        return True

    def _notify_soon(self) -> None:
        if not self._notifying:
            self._notifying = True
            self._scheduler.spawn(self._notifier(), name=f"simnet:{self._name}:readable")

    def _notifier(self):  # type: ignore[no-untyped-def]
        # A micro-thread rather than a timer: a timer due "now" would run in
        # the same timer sweep, and a reader that only wakes a thread (which
        # drains later) would be called again and again before it could.
        try:
            while self._readable is not None and self._queue:
                self._readable()
                yield
        finally:
            self._notifying = False
