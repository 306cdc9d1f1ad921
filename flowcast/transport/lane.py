"""LaneStack: messages between yards (houses) of one host over Unix datagrams.

Same message API as a road; different trust and failure model.  A lane's
socket files are mode 0600 in a 0700 runtime directory (the port makes
them so), so only this user's processes can reach them; the kernel
delivers Unix datagrams in order and without loss (a full receiver makes
the sender wait, never drops).  A lane therefore seals nothing and
acknowledges nothing: an ``Outgoing`` ends ``"sent"`` once the kernel has
it.  What it does check is who is talking: datagrams from a socket path
that is not a known yard are counted and dropped.

Large messages are cut into pages (SEG frames) and many small ones share
a datagram, exactly as on a road.  Each stack instance picks a random boot
id carried in every header; when a yard's boot id changes (it restarted),
its receive state starts afresh at whatever it sends first.
"""

from __future__ import annotations

import os
from typing import Any

from flowcast.transport.keep import validate_name
from flowcast.transport.port import Address, DatagramPort
from flowcast.transport.reliable import SENT, Channel, Outgoing
from flowcast.transport.stack import ChannelEvents, EventSink, Stack
from flowcast.transport.wire import HEADER, HEADER_SIZE, MAGIC, PacketKind, WireError

__all__ = ["LaneStack"]

_LANE = PacketKind.LANE
_pack = HEADER.pack
_unpack = HEADER.unpack_from


class _Yard:
    __slots__ = ("name", "address", "tx", "rx", "rx_boot", "counter")

    def __init__(self, name: str, address: Address, tx: Channel) -> None:
        self.name = name
        self.address = address
        self.tx = tx
        self.rx: Channel | None = None
        self.rx_boot = -1
        self.counter = 0


class LaneStack(Stack):
    """One yard's Unix-datagram stack.

    ``yards`` maps the names of the other yards this one talks to onto their
    socket addresses; only those are heard.  With ``scheduler`` it runs as a
    micro-thread, else drive it with :meth:`service` / :func:`serve`.
    """

    def __init__(
        self,
        port: DatagramPort,
        name: str,
        yards: dict[str, Address] | None = None,
        *,
        scheduler: Any = None,
        clock: Any = None,
        max_message: int = (64 << 20) + (1 << 16),
        events: EventSink | None = None,
    ) -> None:
        super().__init__(port, scheduler=scheduler, clock=clock, name=validate_name(name))
        self.boot = int.from_bytes(os.urandom(4), "big")
        self.max_message = max_message
        self._max_body = port.max_datagram - HEADER_SIZE
        self._yards: dict[str, _Yard] = {}
        self._by_address: dict[Address, _Yard] = {}
        for yard, address in (yards or {}).items():
            self.add_yard(yard, address)
        if events is not None:
            self.set_events(events)
        if scheduler is not None:
            self.start()

    def add_yard(self, name: str, address: Address) -> None:
        """Accept and address the yard ``name`` at ``address`` (its socket path)."""
        validate_name(name, "yard name")
        tx = Channel(self._max_body, _no_delivery, self._completed, acks=False, max_message=self.max_message)
        yard = _Yard(name, address, tx)
        self._watch_yard(yard)
        old = self._yards.pop(name, None)
        if old is not None:
            self._by_address.pop(old.address, None)
        self._yards[name] = yard
        self._by_address[address] = yard

    def _watch_yard(self, yard: _Yard) -> None:
        """Give the yard's channels their event watches (or take them away).

        A lane's message ids carry the sender's boot id: sequence numbers
        start again when a yard restarts.  Routes name yards, not estates.
        """
        sink = self._events
        for channel, mine in ((yard.tx, True), (yard.rx, False)):
            if channel is None:
                continue
            if mine:
                channel.completed = self._completed  # the recording variant while recording
            if sink is None:
                channel.watch = None
                continue
            if not mine and yard.rx_boot < 0:
                continue
            channel.watch = ChannelEvents(
                sink,
                self.clock.now,
                self._born,
                f"{self.name}:{self.boot:08x}",
                f"{yard.name}:{yard.rx_boot:08x}",
                (self.name, ""),
                (yard.name, ""),
            )

    def _watch_channels(self) -> None:
        for yard in self._yards.values():
            self._watch_yard(yard)

    def _route_of(self, msg: Outgoing) -> tuple[tuple, tuple]:
        return ("", self.name, "", msg.flow), ("", str(msg.remote), "", msg.flow)

    def _channel_watch(self, to: str) -> ChannelEvents | None:
        return self._yards[to].tx.watch

    def remove_yard(self, name: str) -> None:
        yard = self._yards.pop(name)
        self._by_address.pop(yard.address, None)

    @property
    def yards(self) -> list[str]:
        return list(self._yards)

    @property
    def address(self) -> Address:
        return self.port.address

    def pending(self) -> int:
        """Messages not yet handed to the kernel (queued, or in a waiting datagram)."""
        waiting = sum(len(carried) for _, _, carried in self._outq if carried)
        return waiting + sum(len(y.tx.fresh) for y in self._yards.values())

    # -- stack hooks -------------------------------------------------------------

    def _completed(self, msg: Outgoing) -> None:
        if self.on_done is not None:
            self.on_done(msg)

    def _submit(self, msg: Outgoing, to: str) -> None:
        yard = self._yards.get(to)
        if yard is None:
            raise KeyError(f"no known yard {to[:64]!r}")
        msg.timeout = None  # a lane has no acks to time out on
        yard.tx.submit(msg, 0.0)

    def _receive(self, data: bytes, address: Address, now: float) -> None:
        yard = self._by_address.get(address)
        if yard is None:
            self.counts["unknown_yard"] += 1
            return
        if len(data) < HEADER_SIZE or data[0] != MAGIC or data[1] != _LANE:
            self.counts["malformed"] += 1
            return
        boot = _unpack(data)[3]
        rx = yard.rx
        if rx is None or boot != yard.rx_boot:
            name = yard.name

            inbox = self.inbox

            def deliver(flow: int, flags: int, payload: bytes, _name: str = name) -> None:
                if self.on_message is None:  # the common case, inlined: one call per message
                    inbox.append((_name, flow, flags, payload))
                    self.inbox_bytes += len(payload)
                else:
                    self._deliver_to_inbox(_name, flow, flags, payload)

            rx = yard.rx = Channel(self._max_body, deliver, None, acks=False, adopt=True, max_message=self.max_message)
            yard.rx_boot = boot
            if self._events is not None:
                self._watch_yard(yard)
        try:
            rx.handle(data[HEADER_SIZE:], now)
        except WireError:
            self.counts["bad_frames"] += 1

    def _flush(self, now: float) -> None:
        if self._outq and not self._drain_outq():
            return
        boot = self.boot
        for yard in self._yards.values():
            tx = yard.tx
            while tx.fresh or tx.resend:
                built = tx.build()
                if built is None:
                    break
                counter = yard.counter
                yard.counter = counter + 1
                if not self._emit(_pack(MAGIC, _LANE, 0, boot, counter) + built[0], yard.address, built[1]):
                    return

    def _handed_over(self, carried: list) -> None:
        done = self.on_done if self._events is None else self._completed
        last = None
        for msg in carried:
            if msg is last:
                continue  # segments of one message come in a row
            last = msg
            if msg.nseg == 1 or msg.next_seg >= msg.nseg:
                if msg._state == 0:
                    msg._state = SENT
                    if done is not None:
                        done(msg)

    def _timers(self, now: float) -> None:
        pass

    def next_deadline(self) -> float | None:
        return None


def _no_delivery(flow: int, flags: int, payload: bytes) -> None:  # pragma: no cover - tx channels never receive
    raise AssertionError("a transmit channel received a frame")
