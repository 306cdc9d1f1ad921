"""LaneStack: messages between yards (houses) of one host over Unix datagrams.

Same message API as a road; different trust and failure model.  A lane's
socket files are mode 0600 in a 0700 runtime directory (the port makes
them so), so only this user's processes can reach them; the kernel
delivers Unix datagrams in order and without loss (a full receiver makes
the sender wait, never drops).  A lane therefore encrypts nothing.  What it
does check is who is talking: datagrams from a socket path that is not a
known yard are counted and dropped -- and, since any process of the user
can bind a yard's path, a stack given ``keys`` (lanekeys.py; every house of
an estate) accepts a datagram only with a good MAC of that yard's key and
a sequence number it has not seen (docs/protocol.md section 9).

Large messages are cut into pages (SEG chunks) and many small ones share
a datagram, exactly as on a road.  Each stack instance picks a random,
non-zero boot id carried in every header.

Two modes, chosen per stack (both ends of a lane must agree):

* ``acks=False`` (raw, the default): nothing is acknowledged; an
  ``Outgoing`` ends ``"sent"`` once the kernel has its datagram.  Fast
  (one less chunk per datagram, no books per message), but whatever sits
  in a receiver's socket buffer, or in a datagram sent to a yard that is
  down, is lost with it -- and the sender never knows.  When a yard's boot
  id changes its receive state starts afresh at whatever it sends first.
* ``acks=True`` (acknowledged): the road's link -- ACK chunks, delivery
  reported per stream, resend, receive window -- on plain datagrams.  An
  ``Outgoing`` is ``"delivered"`` only once the receiving yard's stack has
  handed it to its application (a ``message`` listener returned, or it entered the
  inbox); until then the sender keeps it.  Every datagram also names the
  *receiver's* boot id it is meant for, so one link lives exactly as
  long as the pair of incarnations (sender boot, receiver boot): a
  receiver drops data meant for an earlier incarnation of itself and
  answers with a HELLO (an empty datagram: "I am boot X"); a sender that
  hears a new boot id from a yard moves every message not yet reported
  delivered into a new link, in order per stream, and sends them to the
  new incarnation.  Messages the old incarnation acknowledged are never
  sent again; messages it received but had not acknowledged when it died
  may be delivered twice (at-least-once across a crash, exactly-once
  while both ends live).  A yard that is down is probed with HELLOs
  (back-off 50 ms doubling to 2 s) or, if it was known, its data resent
  on the retransmission timeout (back-off 200 ms doubling to 8 s); a
  starting stack sends a HELLO to every yard, so a restarted yard is
  heard from at once.  Messages wait for their yard without a deadline
  unless given a ``timeout``.

Raw stays the default: acknowledged costs the sender about 1 us more per
small message (the link's books; at best two thirds of the raw message
rate, see docs/protocol.md section 9),
and the two ends must agree on the mode, so it is asked for where a
restart must lose nothing -- the routing layer's lanes.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

from flowcast.transport.keep import validate_name
from flowcast.transport.lanekeys import REPLAYED, TRAILER_SIZE, LaneKeys, YardMac, check, seal
from flowcast.transport.laneyard import PROBE_FIRST, PROBE_MAX, Yard
from flowcast.transport.port import Address, DatagramPort
from flowcast.transport.reliable import Link, Outgoing
from flowcast.transport.linkevents import LinkEvents, EventSink
from flowcast.transport.stack import INBOX_ENTRY, Stack
from flowcast.transport.wire import F_UNRELIABLE, HEADER, HEADER_SIZE, MAGIC, PacketKind, WireError

__all__ = ["LaneStack", "LANE_ACKED", "LANE_AUTH"]

_LANE = PacketKind.LANE
_pack = HEADER.pack
_unpack = HEADER.unpack_from

#: Header flag of an acknowledged lane's datagrams: the body starts with
#: the receiver's boot id (u32, 0 = not known yet), then chunks.
LANE_ACKED = 0x0001
#: Header flag of an authenticated lane's datagrams: after the chunks come a
#: sequence number (u64) and a 16-byte tag (BLAKE2b, or Poly1305 from
#: 4 KiB), see lanekeys.py.
LANE_AUTH = 0x0002
_AHEADER = struct.Struct("!BBHIQI")  # header + the receiver's boot id
_AHEADER_SIZE = _AHEADER.size  # 20
_apack = _AHEADER.pack
_aunpack = _AHEADER.unpack_from

LANE_MIN_RTO = 0.2  # a lane loses nothing while its peer lives: a resend is for a yard that died
LANE_MAX_RTO = 8.0
STALE_REPLY_GAP = 0.01  # at most one HELLO per yard this often in answer to stale data


class _LaneLink(Link):
    """A link whose retransmission timeout suits a lane.

    On a lane nothing is lost while the receiver lives, and a slow receiver
    holds the sender in EAGAIN rather than dropping: a short timeout would
    only resend what is merely queued.  Loss means the peer died, and a
    restarted peer announces itself (HELLO), so the timeout is a back-stop.
    """

    def _rto_now(self) -> float:
        rto = self.rto if self.rto > LANE_MIN_RTO else LANE_MIN_RTO
        return min(LANE_MAX_RTO, rto * (1 << self.backoff))


class LaneStack(Stack):
    """One yard's Unix-datagram stack.

    ``yards`` maps the names of the other yards this one talks to onto their
    socket addresses; only those are heard.  With ``scheduler`` it runs as a
    micro-thread, else drive it with :meth:`service` / :func:`serve`.

    ``acks=True`` makes delivery acknowledged and survive a yard's restart
    (module docstring, docs/protocol.md section 9); every yard of a lane
    must use the same mode.  ``receive_window`` (bytes delivered but not
    yet taken by the application before the sender must wait) applies to
    acknowledged lanes; a raw lane is paced by the kernel's socket queue.

    ``keys`` (:class:`~flowcast.transport.lanekeys.LaneKeys`) authenticates
    every datagram both ways: one that fails its tag is dropped
    (``lane_forged``), one already heard (``lane_replayed``), before any of
    it is read; only yards the keys name can be added.  Without keys the
    lane trusts the socket path, as it always did: for tests, benches and
    single-process tools.  An estate's houses always authenticate
    (``open_house`` hands ``wire_lane`` the keys its supervisor gave it);
    every yard of a lane must agree.
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
        acks: bool = False,
        receive_window: int = 8 << 20,
        keys: LaneKeys | None = None,
    ) -> None:
        super().__init__(port, scheduler=scheduler, clock=clock, name=validate_name(name))
        boot = 0
        while not boot:
            boot = int.from_bytes(os.urandom(4), "big")
        self.boot = boot
        self.acks = bool(acks)
        self.max_message = max_message
        self.receive_window = receive_window
        if keys is not None and keys.yard != self.name:
            raise ValueError(f"lane keys are yard {keys.yard!r}'s, not {self.name!r}'s")
        self.keys = keys
        # Nothing sealed before this stack existed is accepted by it: the
        # floor of every yard's sequence numbers (monotonic_ns is one clock
        # for every process of the host; senders seal with it too).
        self._seq = self._floor = time.monotonic_ns()
        self._flag = 0 if keys is None else LANE_AUTH
        trailer = 0 if keys is None else TRAILER_SIZE
        self._max_body = port.max_datagram - (_AHEADER_SIZE if self.acks else HEADER_SIZE) - trailer
        if self.acks:
            self.default_timeout = None  # wait for a yard that is restarting; pass timeout= to bound it
        self._yards: dict[str, Yard] = {}
        self._by_address: dict[Address, Yard] = {}
        for yard, address in (yards or {}).items():
            self.add_yard(yard, address)
        if events is not None:
            self.set_events(events)
        if scheduler is not None:
            self.start()

    def add_yard(self, name: str, address: Address) -> None:
        """Accept and address the yard ``name`` at ``address`` (its socket path).

        Naming a known yard again moves it to ``address``; on an acknowledged
        lane its undelivered messages go along, to be sent to whichever
        incarnation answers there.
        """
        validate_name(name, "yard name")
        keys = self.keys
        if keys is not None and name not in keys.send:
            raise ValueError(f"no lane key for yard {name!r}: an authenticated lane hears only yards its keys name")
        old = self._yards.pop(name, None)
        if old is not None:
            self._by_address.pop(old.address, None)
        if self.acks:
            yard = Yard(name, address, None)
            yard.link = self._new_link(yard)
            yard.hello_due = True  # announce this incarnation
            if old is not None and old.link is not None:
                self._carry(old.link, yard)
        else:
            tx = Link(self._max_body, _no_delivery, self._done_call(), acks=False, max_message=self.max_message)
            yard = Yard(name, address, tx)
        if keys is not None:
            yard.mac = YardMac(keys.send[name], keys.hear[name], self._floor)
            if old is not None and old.mac is not None:
                # what was heard stays heard: a fresh floor would let every
                # datagram recorded since this stack started be replayed once
                yard.mac.heard = max(old.mac.heard, self._floor)
        self._watch_yard(yard)
        self._yards[name] = yard
        self._by_address[address] = yard

    def _deliverer(self, name: str) -> Callable[[int, int, bytes], None]:
        """Where a link hands the messages of yard ``name``: one closure, so the inbox append is inlined."""
        inbox = self.inbox
        hooks = self.hooks

        def deliver(stream: int, flags: int, payload: bytes, _name: str = name) -> None:
            if hooks.message is None:  # the common case, inlined: one call per message
                inbox.append((_name, stream, flags, payload))
                self.inbox_bytes += len(payload) + INBOX_ENTRY
            else:
                self._deliver_to_inbox(_name, stream, flags, payload)

        return deliver

    def _new_link(self, yard: Yard) -> Link:
        return _LaneLink(
            self._max_body,
            self._deliverer(yard.name),
            self._done_call(),
            held=self._held,
            receive_window=self.receive_window,
            max_message=self.max_message,
            now=self.clock.now(),
        )

    def _held(self) -> int:
        return self.inbox_bytes

    def _watch_yard(self, yard: Yard) -> None:
        """Give the yard's links their event watches (or take them away).

        A lane's message ids carry the sender's boot id (raw) or the pair of
        boot ids (acknowledged): sequence numbers start again when a yard
        restarts, and on an acknowledged lane when its peer does.  Routes
        name yards, not estates.
        """
        sink = self._events
        if self.acks:
            link = yard.link
            if link is None:
                return
            if sink is None or not yard.peer:
                link.watch = None
                return
            link.watch = LinkEvents(
                sink,
                self.clock.now,
                self._born,
                f"{self.name}:{self.boot:08x}{yard.peer:08x}",
                f"{yard.name}:{yard.peer:08x}{self.boot:08x}",
                (self.name, ""),
                (yard.name, ""),
            )
            return
        for link, mine in ((yard.tx, True), (yard.rx, False)):
            if link is None:
                continue
            if sink is None:
                link.watch = None
                continue
            if not mine and yard.rx_boot < 0:
                continue
            link.watch = LinkEvents(
                sink,
                self.clock.now,
                self._born,
                f"{self.name}:{self.boot:08x}",
                f"{yard.name}:{yard.rx_boot:08x}",
                (self.name, ""),
                (yard.name, ""),
            )

    def _watch_links(self) -> None:
        for yard in self._yards.values():
            self._watch_yard(yard)

    def _links(self) -> Iterable[Link]:
        return [link for yard in self._yards.values() for link in ((yard.link,) if self.acks else (yard.tx,)) if link is not None]

    def _route_of(self, msg: Outgoing) -> tuple[tuple, tuple]:
        return ("", self.name, "", msg.stream), ("", str(msg.remote), "", msg.stream)

    def _link_watch(self, to: str) -> LinkEvents | None:
        yard = self._yards[to]
        return yard.link.watch if self.acks else yard.tx.watch  # type: ignore[union-attr]

    @property
    def authenticated(self) -> bool:
        return self.keys is not None

    @property
    def yards(self) -> list[str]:
        return list(self._yards)

    @property
    def address(self) -> Address:
        return self.port.address

    def peer_boot(self, name: str) -> int | None:
        """The boot id yard ``name`` last announced (acknowledged lanes), or None."""
        yard = self._yards[name]
        if self.acks:
            return yard.peer or None
        return yard.rx_boot if yard.rx_boot >= 0 else None

    def pending(self) -> int:
        """Messages not yet final.

        Raw lane: not yet handed to the kernel (queued, or in a waiting
        datagram).  Acknowledged lane: reliable messages not yet reported
        delivered (or failed) -- fire-and-forget ones are not counted.
        """
        if self.acks:
            return sum(yard.link.pending_count for yard in self._yards.values())  # type: ignore[union-attr]
        waiting = sum(len(carried) for _, _, carried in self._outq if carried)
        return waiting + sum(len(y.tx.fresh) for y in self._yards.values())  # type: ignore[union-attr]

    def close(self) -> None:
        """Close the port; on an acknowledged lane undelivered messages fail ("stack closed")."""
        if self._closed:
            return
        super().close()
        if self.acks:
            for yard in self._yards.values():
                if yard.link is not None:
                    yard.link.fail_all("stack closed")

    # -- stack hooks -------------------------------------------------------------

    def _consumed(self) -> None:
        if self.acks:
            for yard in self._yards.values():
                if yard.peer:
                    yard.link.window_opened()  # type: ignore[union-attr]

    def _submit(self, msg: Outgoing, to: str) -> None:
        yard = self._yards.get(to)
        if yard is None:
            raise KeyError(f"no known yard {to[:64]!r}")
        if self.acks:
            link = yard.link
            if not yard.peer and not _waiting(link):  # type: ignore[arg-type]
                # The first message waiting for a yard not heard from: probe
                # soon (not twice at once), back-off afresh.
                yard.probe_every = PROBE_FIRST
                if yard.last_hello >= 0:
                    yard.next_probe = max(self.clock.now(), yard.last_hello + PROBE_FIRST)
                else:
                    yard.next_probe = 0.0  # the first HELLO is still to go: it goes with the next flush anyway
            link.submit(msg, 0.0 if msg.timeout is None else self.clock.now())  # type: ignore[union-attr]
            return
        msg.timeout = None  # a raw lane has no acks to time out on
        yard.tx.submit(msg, 0.0)  # type: ignore[union-attr]

    def _receive(self, data: bytes, address: Address, now: float) -> None:
        yard = self._by_address.get(address)
        if yard is None:
            self.counts["unknown_yard"] += 1
            return
        mac = yard.mac
        if mac is None:
            end = len(data)
        else:
            end = check(mac, data)  # the chunks end where the trailer starts: sliced once, below
            if end < 0:
                self._refused(data, end)
                return
        if end < HEADER_SIZE or data[0] != MAGIC or data[1] != _LANE:
            self.counts["malformed"] += 1
            return
        if self.acks:
            self._receive_acked(yard, data, end, now)
            return
        _, _, flags, boot, _ = _unpack(data)
        if flags & LANE_AUTH != self._flag:
            self.counts["lane_auth_mismatch"] += 1
            return
        if flags & LANE_ACKED:
            self.counts["lane_mode_mismatch"] += 1  # the other end acknowledges; this one does not
            return
        rx = yard.rx
        if rx is None or boot != yard.rx_boot:
            rx = yard.rx = Link(self._max_body, self._deliverer(yard.name), None, acks=False, adopt=True, max_message=self.max_message)
            yard.rx_boot = boot
            if self._events is not None:
                self._watch_yard(yard)
        try:
            rx.handle(data[HEADER_SIZE:end], now)
        except WireError:
            self.counts["bad_chunks"] += 1

    def _receive_acked(self, yard: Yard, data: bytes, end: int, now: float) -> None:
        if end < _AHEADER_SIZE:
            self.counts["malformed"] += 1
            return
        _, _, flags, boot, counter, target = _aunpack(data)
        if flags & LANE_AUTH != self._flag:
            self.counts["lane_auth_mismatch"] += 1
            return
        if not flags & LANE_ACKED:
            self.counts["lane_mode_mismatch"] += 1  # a raw lane's datagram: nothing to acknowledge it with
            return
        if boot != yard.peer:
            if not boot or boot in yard.retired:
                self.counts["stale_boot"] += 1  # from an incarnation already replaced
                return
            self._new_peer(yard, boot, now)
        if target != self.boot:
            # Meant for an earlier incarnation of this yard (or a HELLO that
            # does not know this one yet): say who answers here now.
            if end == _AHEADER_SIZE:
                yard.hello_due = True
            else:
                self.counts["stale_target"] += 1
                if now - yard.last_hello >= STALE_REPLY_GAP or yard.last_hello < 0:
                    yard.hello_due = True
            return
        if end == _AHEADER_SIZE:
            return  # a HELLO to this incarnation: nothing more to learn
        link = yard.link
        try:
            link.handle(data[_AHEADER_SIZE:end], now)  # type: ignore[union-attr]
        except WireError:
            self.counts["bad_chunks"] += 1
            return
        link.received(counter)  # type: ignore[union-attr]

    def _refused(self, data: bytes, why: int) -> None:
        """Count a datagram that failed authentication (its bytes are not trusted, only counted)."""
        if why == REPLAYED:
            self.counts["lane_replayed"] += 1
        elif len(data) >= HEADER_SIZE and data[0] == MAGIC and _unpack(data)[2] & LANE_AUTH:
            self.counts["lane_forged"] += 1
        else:
            self.counts["lane_unauthenticated"] += 1  # an unkeyed stack, or not a lane datagram at all

    def _seal(self, yard: Yard, head: bytes, body: bytes) -> bytes:
        now = time.monotonic_ns()
        seq = self._seq = now if now > self._seq else self._seq + 1
        return seal(yard.mac, head, body, seq)  # type: ignore[arg-type]

    def _new_peer(self, yard: Yard, boot: int, now: float) -> None:
        """``yard`` speaks with a new boot id: a new link for the new pair of incarnations.

        Everything not yet reported delivered moves into it, in order per
        stream, with new sequence numbers (as into a road's new session); what
        the old incarnation had acknowledged is done and stays done.  Held
        receive state is dropped with the old link.
        """
        restarted = bool(yard.peer)
        if restarted:
            yard.retired.append(yard.peer)
            self.counts["yard_restarts"] += 1
        old = yard.link
        yard.peer = boot
        yard.counter = 0
        yard.link = self._new_link(yard)
        yard.probe_every = PROBE_FIRST
        self._watch_yard(yard)
        if old is not None:
            carried = self._carry(old, yard)
            if restarted:
                self.counts["carried_to_new_boot"] += carried
        # Datagrams still queued for the old incarnation would only be refused.
        outq = self._outq
        if outq:
            address = yard.address
            kept = [entry for entry in outq if entry[1] != address]
            if len(kept) != len(outq):
                outq.clear()
                outq.extend(kept)

    def _carry(self, old: Link, yard: Yard) -> int:
        """Move ``old``'s undelivered messages into ``yard``'s link, in order; how many reliable ones."""
        loose = [m for m in old.fresh if m.flags & F_UNRELIABLE and m.pending]
        carried = old.take_unfinished()
        link = yard.link
        watch = link.watch  # type: ignore[union-attr]
        now = self.clock.now()
        for msg in carried + loose:
            link.submit(msg, now)  # type: ignore[union-attr]
            if watch is not None:
                watch.sent(msg)  # under a new id: sequence numbers start again with the pair
        return len(carried)

    def _flush(self, now: float) -> None:
        if self._outq and not self._drain_outq():
            return
        boot = self.boot
        flag = self._flag
        if self.acks:
            emit = self._emit
            flag |= LANE_ACKED
            for yard in self._yards.values():
                peer = yard.peer
                address = yard.address
                if yard.hello_due:
                    yard.hello_due = False
                    yard.last_hello = now
                    hello = _apack(MAGIC, _LANE, flag, boot, 0, peer)
                    if yard.mac is not None:
                        hello = self._seal(yard, hello, b"")
                    if not emit(hello, address):
                        return
                if not peer:
                    continue
                link = yard.link
                while link.ack_owed or link.ping_owed or ((link.resend or link.fresh) and link.can_send()):  # type: ignore[union-attr]
                    built = link.build()  # type: ignore[union-attr]
                    if built is None:
                        break
                    body, chunks = built
                    counter = yard.counter
                    yard.counter = counter + 1
                    link.sent(counter, len(body), chunks, now)  # type: ignore[union-attr]
                    head = _apack(MAGIC, _LANE, flag, boot, counter, peer)
                    datagram = head + body if yard.mac is None else self._seal(yard, head, body)
                    if not emit(datagram, address):
                        return
            return
        for yard in self._yards.values():
            tx = yard.tx
            while tx.fresh or tx.resend:  # type: ignore[union-attr]
                built = tx.build()  # type: ignore[union-attr]
                if built is None:
                    break
                counter = yard.counter
                yard.counter = counter + 1
                head = _pack(MAGIC, _LANE, flag, boot, counter)
                datagram = head + built[0] if yard.mac is None else self._seal(yard, head, built[0])
                if not self._emit(datagram, yard.address, built[1]):
                    return

    def _handed_over(self, carried: list) -> None:
        done = self._completed
        last = None
        for msg in carried:
            if msg is last:
                continue  # segments of one message come in a row
            last = msg
            if msg.nseg == 1 or msg.next_seg >= msg.nseg:
                if msg.pending:
                    msg.mark_sent()
                    if done is not None:
                        done(msg)

    def _timers(self, now: float) -> None:
        if not self.acks:
            return
        for yard in self._yards.values():
            link = yard.link
            when = link.next_deadline()  # type: ignore[union-attr]
            if when is not None and when <= now:
                link.poll(now)  # type: ignore[union-attr]
            if not yard.peer and _waiting(link) and now >= yard.next_probe:  # type: ignore[arg-type]
                yard.hello_due = True
                yard.next_probe = now + yard.probe_every
                yard.probe_every = min(yard.probe_every * 2, PROBE_MAX)

    def next_deadline(self) -> float | None:
        if not self.acks:
            return None
        deadline: float | None = None
        for yard in self._yards.values():
            link = yard.link
            when = link.next_deadline()  # type: ignore[union-attr]
            if not yard.peer and _waiting(link):  # type: ignore[arg-type]
                probe = yard.next_probe
                if when is None or probe < when:
                    when = probe
            if when is not None and (deadline is None or when < deadline):
                deadline = when
        return deadline


def _waiting(link: Link) -> bool:
    """Whether messages wait in ``link`` (for a yard not heard from yet)."""
    return bool(link.pending_count or link.fresh)


def _no_delivery(stream: int, flags: int, payload: bytes) -> None:  # pragma: no cover - tx links never receive
    raise AssertionError("a transmit link received a chunk")
