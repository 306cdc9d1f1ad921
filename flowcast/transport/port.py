"""The datagram port interface every stack talks to.

A stack never touches a socket directly: it sends and receives datagrams
through a :class:`DatagramPort`.  Two families implement it -- real sockets
(UDP for roads, Unix datagrams for lanes) and a simulated network, seeded,
that runs on the scheduler's virtual clock.  The same stack code therefore
runs over loopback in a benchmark and inside a deterministic simulation in
a test.

Contract (kept deliberately small):

* ``send`` never blocks.  It returns ``False`` when the datagram could not be
  handed to the OS or network *now* (EAGAIN, a full Unix-datagram queue):
  the caller keeps the datagram queued and tries again when
  ``on_writable`` fires.  A datagram is never silently consumed on
  failure -- see NOTES.md on hio's lost-datagram bug.
* A destination that is not there (connection refused, unreachable, no such
  socket file) is not an error of the sender: ``send`` returns True, the
  datagram is lost as a router would lose it, and the port counts it
  (``counts["unreachable"]``).  A datagram longer than ``max_datagram``
  raises ``ValueError``, and so does any use of a closed port (``OSError``):
  those are bugs in the caller.
* ``receive`` never blocks; it returns ``None`` when nothing is waiting.
  ``receive_many`` drains up to ``limit`` datagrams in one call, which is
  where a stack amortises the wake-up.
* ``on_readable(callback)`` registers a persistent callback run by the
  scheduler whenever datagrams may be waiting (a selector registration for
  sockets, an in-process notification for the simulated network).  The
  stack drains with ``receive_many`` until it returns fewer than asked
  (or, for a port with ``empty_read_costs`` and sparse traffic, reads one);
  readiness is level-triggered, so a callback that leaves datagrams waiting
  is called again (in the next scheduler round, never in a tight loop).
  Datagrams a port refuses (oversized, no reply address) are counted and
  never returned.
* ``on_writable(callback)`` is one-shot: the callback runs once, when a
  ``send`` that returned False may now succeed; registering again (or None)
  replaces it.
* Both callbacks need the port to have been made with a scheduler.  Real
  socket ports made without one are driven from plain Python: select on
  ``fileno()`` for reading and, after a False ``send``, on
  ``writable_fileno()`` for writing.
* Extension (every port in :mod:`flowcast.transport.ports` has it; check
  with ``hasattr``): ``send_segments(data, size, address) -> int`` sends
  ``data`` as consecutive datagrams of ``size`` bytes (the last may be
  shorter) and returns how many were handed over -- always a prefix; the
  caller keeps the rest, as after a False ``send``.  UDP does it with GSO,
  far fewer system calls; a UDP port made with ``gro=True`` receives runs
  of datagrams joined by the kernel and splits them, invisibly.
* Addresses are opaque hashable values: ``(host, port)`` tuples for UDP,
  path strings for Unix datagrams, names for the simulated network.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

Address = Hashable


class DatagramPort(Protocol):
    """One bound datagram endpoint."""

    @property
    def address(self) -> Address:
        """The address peers send to."""
        ...

    @property
    def max_datagram(self) -> int:
        """Largest payload this port can carry in one datagram."""
        ...

    def send(self, data: bytes, address: Address) -> bool:
        """Hand one datagram over; False if it must be retried later."""
        ...

    def receive(self) -> tuple[bytes, Address] | None:
        """One waiting datagram, or None."""
        ...

    def receive_many(self, limit: int) -> list[tuple[bytes, Address]]:
        """Up to ``limit`` waiting datagrams (possibly none)."""
        ...

    def on_readable(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` when datagrams may be waiting; None unregisters."""
        ...

    def on_writable(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` once sending may succeed again; None unregisters."""
        ...

    def close(self) -> None:
        ...
