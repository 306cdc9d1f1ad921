"""RoadStack: secure, reliable messages between estates over UDP.

Transactions (RAET's names): *join* introduces long-term keys and applies
the acceptance policy; *allow* runs the CurveCP-style handshake and makes a
session; *alive* heartbeats keep presence current; *message* is the
reliable transport of reliable.py inside sealed datagrams.

Rules that hold everywhere below:

* Nothing changes session state before a datagram authenticates: sealed
  packets are looked up by session id, checked against the replay window,
  and opened; only then are the remote's address, presence or channel
  touched.  HELLO and COOKIE-answering are stateless.
* Every parse error is counted in ``counts`` and the datagram dropped.
"""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from flowcast.transport import handshake as hs
from flowcast.transport.budget import (
    DEFAULT_BACKLOG_BYTES,
    DEFAULT_BACKLOG_MESSAGES,
    DEFAULT_HOLD_BUDGET,
    DEFAULT_IDLE_AFTER,
    DEFAULT_INCOMPLETE_AFTER,
    HoldBudget,
    release,
)
from flowcast.transport.crypto import Scratch, derive_session_keys, fingerprint
from flowcast.transport.joinbudget import JoinBudget
from flowcast.transport.joingate import JoinGate, build_join_cookie, parse_join_cookie, unwrap_join, wrap_join
from flowcast.transport.keep import Acceptance, Keep, RemoteRecord, Status
from flowcast.transport.port import Address, DatagramPort
from flowcast.transport.presence import Presence, PresenceListener
from flowcast.transport.reliable import Channel, Outgoing
from flowcast.transport.revoke import Sweep, may_allow
from flowcast.transport.session import Session
from flowcast.transport.stack import ChannelEvents, EventSink, Stack
from flowcast.transport.wire import ALLOW_ACK, HEADER, HEADER_SIZE, MAGIC, PATH, PING, FrameKind, PacketKind, WireError

__all__ = ["RoadStack", "Remote", "JoinAttempt", "BACKLOG_FULL"]

#: The reason of a message refused because its remote's backlog is full.
BACKLOG_FULL = "backlog full"
#: The reason of a message failed because its remote left the keep (evicted) while it waited.
REMOTE_FORGOTTEN = "remote forgotten"

_ALLOW_ACK_KIND = FrameKind.ALLOW_ACK
_SEALED = PacketKind.SEALED
_unpack_header = HEADER.unpack_from
_OVERHEAD = HEADER_SIZE + 16  # header + MAC
_PING = PING.pack(FrameKind.PING, 0)
_ALIVE = Presence.ALIVE
_DEAD = Presence.DEAD


def _random32() -> int:
    while True:
        value = int.from_bytes(os.urandom(4), "big")
        if value:
            return value


class _Allowing:
    """An allow this stack initiated; lives until ALLOW_ACK or its deadline."""

    __slots__ = ("tag", "short", "stage", "packet", "next_send", "interval", "deadline", "session")

    def __init__(self, tag: int, now: float, deadline: float) -> None:
        self.tag = tag
        self.short = hs.ShortTerm()
        self.stage = "hello"
        self.packet = b""
        self.next_send = now
        self.interval = 0.1
        self.deadline = deadline
        self.session: Session | None = None


class JoinAttempt:
    """A join this stack sent; ``result`` becomes accepted, pending, refused or timeout."""

    __slots__ = ("tag", "nonce", "address", "packet", "next_send", "interval", "deadline", "result", "reason", "cookie_used")

    def __init__(self, tag: int, address: Address, packet: bytes, nonce: bytes, now: float, deadline: float) -> None:
        self.tag = tag
        self.nonce = nonce
        self.address = address
        self.packet = packet
        self.next_send = now
        self.interval = 0.1
        self.deadline = deadline
        self.result: str | None = None
        self.reason = ""
        self.cookie_used = False  # answered a JOIN_COOKIE since the last send (one per send: no ping-pong)


class Remote:
    """A remote estate as this stack knows it."""

    __slots__ = (
        "record",
        "named",
        "_address",
        "_places",
        "session",
        "allowing",
        "presence",
        "last_heard",
        "last_sent",
        "backlog",
        "backlog_bytes",
        "next_allow",
        "last_ping",
        "probes",
        "due",
    )

    def __init__(self, record: RemoteRecord, address: Address | None, places: dict[Address, int] | None = None) -> None:
        self.record = record
        self.named: str | None = None  # the name it holds in the stack's _by_name, if any
        self._address: Address | None = None
        self._places = places
        self.address = address
        self.session: Session | None = None
        self.allowing: _Allowing | None = None
        self.presence = Presence.JOINED
        self.last_heard = 0.0
        self.last_sent = 0.0
        self.backlog: list[Outgoing] = []
        self.backlog_bytes = 0  # of the messages in backlog (kept by _submit, _established, _expire_backlog)
        self.next_allow = 0.0
        self.last_ping = 0.0
        self.probes: dict[Address, tuple[int, float]] = {}  # candidate address -> (token, until)
        self.due: float | None = None  # its deadline as the stack's heap has it (None: none there)

    @property
    def address(self) -> Address | None:
        return self._address

    @address.setter
    def address(self, value: Address | None) -> None:
        # Kept in the stack's count of addresses where remotes are: the
        # token bucket asks it per handshake under a flood (no scan).
        places = self._places
        if places is not None and value != self._address:
            old = self._address
            if old is not None:
                left = places.get(old, 0) - 1
                if left > 0:
                    places[old] = left
                else:
                    places.pop(old, None)
            if value is not None:
                places[value] = places.get(value, 0) + 1
        self._address = value

    @property
    def name(self) -> str:
        return self.record.name

    def requeue(self, msgs: list[Outgoing], *, front: bool = False) -> None:
        """Put ``msgs`` back to wait for this remote (before what waits, with ``front``), counting their bytes."""
        if front:
            self.backlog[:0] = msgs
        else:
            self.backlog.extend(msgs)
        self.backlog_bytes += sum(len(m.data) for m in msgs)

    @property
    def fingerprint(self) -> str:
        return self.record.fingerprint

    def __repr__(self) -> str:
        return f"<Remote {self.name} {self.fingerprint[:12]} {self.presence.value} at {self.address!r}>"


class RoadStack(Stack):
    """One estate's UDP stack.

    ``keep`` must hold local keys (``keep.ensure_local(name)``).  ``policy``
    decides joins from unknown keys.  ``datagram_size`` caps datagrams
    (default: what the port carries -- right for loopback; use 1232 for
    internet paths).  With ``scheduler`` the stack runs as a micro-thread.
    ``hold_budget`` bounds what all sessions hold for order or reassembly,
    ``incomplete_after`` and ``idle_after`` when incomplete messages and
    silent sessions go, ``backlog_messages``/``backlog_bytes`` what waits for
    one remote that is down (budget.py; docs/protocol.md section 10).
    ``events`` (any :class:`~flowcast.transport.stack.EventSink`, such as an
    export Recorder) records message events and presence changes.
    ``join_cookies`` (``load``, ``always``, ``never``) and ``join_rate`` say
    when a JOIN must first prove its source address (joingate.py);
    ``join_work_rate`` caps the JOINs a second that are verified and
    admitted, shared fairly between source addresses, each at most
    ``join_source_rate`` (joinbudget.py).  A keep
    with a :class:`~flowcast.transport.keepwriter.KeepWriter` keeps disk
    work off this stack's thread; joins are then acknowledged once durable.
    """

    def __init__(
        self,
        port: DatagramPort,
        keep: Keep,
        *,
        policy: Acceptance | str = Acceptance.ONCE,
        scheduler: Any = None,
        clock: Any = None,
        datagram_size: int | None = None,
        alive_interval: float = 1.0,
        dead_after: float = 3.5,
        allow_timeout: float = 5.0,
        receive_window: int = 8 << 20,
        max_message: int = (64 << 20) + (1 << 16),
        hold_budget: int = DEFAULT_HOLD_BUDGET,
        incomplete_after: float = DEFAULT_INCOMPLETE_AFTER,
        idle_after: float = DEFAULT_IDLE_AFTER,
        backlog_messages: int = DEFAULT_BACKLOG_MESSAGES,
        backlog_bytes: int = DEFAULT_BACKLOG_BYTES,
        handshake_rate: float = 2000.0,
        events: EventSink | None = None,
        join_cookies: str = "load",
        join_rate: float = 50.0,
        join_work_rate: float = 100.0,
        join_source_rate: float = 20.0,
    ) -> None:
        local = keep.local()
        if local is None:
            raise ValueError("the keep has no local keys: call keep.ensure_local(name) first")
        super().__init__(port, scheduler=scheduler, clock=clock, name=local.name)
        self.keep = keep
        self.local = local
        self.keys = local.keys
        self._pubkey = self.keys.pubkey
        self.policy = Acceptance(policy)
        size = min(datagram_size or port.max_datagram, port.max_datagram)
        if size < 512:
            raise ValueError("datagram_size must be at least 512")
        self.datagram_size = size
        self.alive_interval = alive_interval
        self.dead_after = dead_after
        self.allow_timeout = allow_timeout
        self.receive_window = receive_window
        self.max_message = max_message
        #: What all sessions hold before delivery, against one limit (budget.py).
        self.hold_budget = HoldBudget(hold_budget, incomplete_after=incomplete_after)
        if not idle_after > dead_after:
            raise ValueError("idle_after must be longer than dead_after")
        self.idle_after = float(idle_after)
        if backlog_messages < 1 or backlog_bytes < 1:
            raise ValueError("backlog bounds must be positive")
        self.backlog_messages = int(backlog_messages)
        self.backlog_bytes = int(backlog_bytes)
        self.remotes: dict[str, Remote] = {}  # by fingerprint
        self._by_name: dict[str, Remote] = {}
        self._sessions: dict[int, tuple[Remote, Session]] = {}
        self._allowing: dict[int, Remote] = {}  # by tag
        self._joining: dict[int, JoinAttempt] = {}
        self._long_shared: dict[bytes, bytes] = {}
        self._jar = hs.CookieJar()
        self._scratch = Scratch()  # one small-packet buffer for all sessions (2 KB each otherwise)
        # Per-remote deadlines in a heap of (when, n, remote), stale entries
        # (when != remote.due) dropped lazily; remotes whose deadline may have
        # moved wait in _dirty, those that may have something to send in
        # _flushq.  A wake costs what it touches, not the number of remotes.
        self._due_heap: list[tuple[float, int, Remote]] = []
        self._due_n = itertools.count()
        self._dirty: dict[Remote, None] = {}
        self._flushq: dict[Remote, None] = {}
        self._starved: dict[Remote, None] = {}  # advertised a window under a quarter (see _consumed)
        self._urgent = True  # a deadline may have moved to now or before (see _maybe_due)
        self.handshake_rate = float(handshake_rate)
        self._tokens = self.handshake_rate
        self._tokens_at = self.clock.now()
        self._source: tuple[Remote, Address] | None = None
        self._per_source: dict[Address, tuple[float, float]] = {}
        self._places: dict[Address, int] = {}  # address -> how many remotes are there (Remote.address)
        self._gate = JoinGate(mode=join_cookies, rate=join_rate)
        self._join_budget = JoinBudget(join_work_rate, per_source=join_source_rate)
        # Join replies waiting for their keep records to be durable: (ticket, datagram, address, until).
        self._unwritten: deque[tuple[int, bytes, Address, float]] = deque()
        self._writer_wake: tuple[socket.socket, socket.socket] | None = None
        self._sweep = Sweep()  # live sessions' keys looked at on disk (revoke.py)
        self.on_presence: PresenceListener | None = None
        self.on_event: Callable[[str], None] | None = None
        self.events: list[str] = []
        for record in keep.remotes():
            if record.status is Status.ACCEPTED:
                self._add_remote(record, None)
        if events is not None:
            self.set_events(events)
        if scheduler is not None:
            self.start()

    # -- public API ------------------------------------------------------------

    @property
    def address(self) -> Address:
        return self.port.address

    def join(self, address: Address, *, timeout: float = 10.0) -> JoinAttempt:
        """Introduce ourselves to the estate at ``address``; allow follows on accept."""
        now = self.clock.now()
        tag = _random32()
        nonce = os.urandom(16)
        packet = hs.build_join(self.keys, self.local.name, self.local.role, self.local.mode, nonce, tag)
        attempt = JoinAttempt(tag, address, packet, nonce, now, now + timeout)
        self._joining[tag] = attempt
        self._wake()
        return attempt

    def allow(self, remote: str, address: Address | None = None) -> None:
        """Start a session with a known, accepted remote (name or fingerprint)."""
        target = self._find(remote)
        if address is not None:
            target.address = address
        self._start_allow(target, self.clock.now())
        self._wake()

    def add_remote(self, record: RemoteRecord, address: Address | None = None) -> Remote:
        """Trust ``record`` (stored in the keep as accepted) and remember its address."""
        record.status = Status.ACCEPTED
        stored = self.keep.get(record.fingerprint) or self.keep.add(record)
        stored.status = Status.ACCEPTED
        remote = self._add_remote(stored, address)
        return remote

    def remote(self, name: str) -> Remote:
        return self._find(name)

    def presence(self, name: str) -> Presence:
        try:
            return self._find(name).presence
        except KeyError:
            return Presence.UNKNOWN

    def is_allowed(self, name: str) -> bool:
        try:
            remote = self._find(name)
        except KeyError:
            return False
        return remote.session is not None and remote.session.remote_index is not None

    def pending(self) -> int:
        """Reliable messages not yet delivered or failed, over all remotes."""
        total = 0
        for remote in self.remotes.values():
            total += len(remote.backlog)
            if remote.session is not None:
                total += remote.session.channel.pending_count
        return total

    # -- remotes -------------------------------------------------------------------

    def _find(self, text: str) -> Remote:
        remote = self.remotes.get(text) or self._by_name.get(text)
        if remote is None:
            raise KeyError(f"no accepted remote {text[:64]!r}")
        return remote

    def _add_remote(self, record: RemoteRecord, address: Address | None) -> Remote:
        remote = self.remotes.get(record.fingerprint)
        if remote is None:
            remote = Remote(record, address, self._places)
            self.remotes[record.fingerprint] = remote
        elif address is not None and remote.session is None:
            remote.address = address
        # A remote holds at most one name (this keeps it so), the one in
        # ``named``: a name given up by a rename is free again, found without
        # a look through every name (this runs once per admitted join).
        named = remote.named
        if named is not None and named != record.name and self._by_name.get(named) is remote:
            del self._by_name[named]
        holder = self._by_name.get(record.name)
        if holder is None or holder is remote or holder.record.status is not Status.ACCEPTED or holder.record.name != record.name:
            self._by_name[record.name] = remote
            remote.named = record.name
        self._touch(remote)
        return remote

    def _drop_remote(self, fp: str) -> None:
        remote = self.remotes.get(fp)
        if remote is None or remote.session is not None:
            return
        del self.remotes[fp]
        remote.address = None  # leaves the address count
        if self._by_name.get(remote.name) is remote:
            del self._by_name[remote.name]
        attempt = remote.allowing
        if attempt is not None:
            self._allowing.pop(attempt.tag, None)
            if attempt.session is not None:
                self._sessions.pop(attempt.session.local_index, None)
                release(attempt.session.channel)
            remote.allowing = None
        # What waited for it can never go now: it fails, so its senders hear
        # (the router routes an error back) rather than wait on a remote gone.
        backlog, remote.backlog = remote.backlog, []
        remote.backlog_bytes = 0
        for msg in backlog:
            self._fail(msg, REMOTE_FORGOTTEN)
        remote.due = None  # its heap entries are stale now
        self._dirty.pop(remote, None)
        self._flushq.pop(remote, None)
        self._starved.pop(remote, None)
        self._long_shared.pop(remote.record.pubkey, None)  # cached only for accepted remotes

    def _touch(self, remote: Remote) -> None:
        """``remote``'s deadline may have moved and it may have something to send."""
        self._dirty[remote] = None
        self._flushq[remote] = None

    def _event_note(self, text: str) -> None:
        self.events.append(text)
        if len(self.events) > 1000:
            del self.events[:500]
        if self.on_event is not None:
            self.on_event(text)

    def _set_presence(self, remote: Remote, new: Presence) -> None:
        old = remote.presence
        if old is new:
            return
        remote.presence = new
        if self.on_presence is not None:
            self.on_presence(remote.name, old, new)
        if self._events is not None:
            self._events.presence(remote.name, new.value)

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()

    # -- sending -------------------------------------------------------------------

    def _submit(self, msg: Outgoing, to: str) -> None:
        remote = self.remotes.get(to) or self._by_name.get(to) or self._find(to)
        now = self.clock.now()
        self._dirty[remote] = None
        self._flushq[remote] = None
        if msg.timeout is not None and not msg.flags & 0x01:
            msg.deadline = now + msg.timeout
            if msg.timeout <= 0:
                self._urgent = True
        session = remote.session
        if session is not None and session.remote_index is not None and remote.presence is not _DEAD:
            session.channel.submit(msg, now)
        else:
            # No session, or the remote is down: the message waits in the
            # backlog, which is bounded (a dead remote's channel would not be).
            size = len(msg.data)
            if size > self.max_message:
                raise ValueError(f"message of {size} bytes exceeds the {self.max_message}-byte limit")
            if len(remote.backlog) >= self.backlog_messages or (remote.backlog and remote.backlog_bytes + size > self.backlog_bytes):
                # The remote is down and enough waits for it already: this one
                # fails now, so its sender hears (the router routes an error back).
                self.counts["backlog_full"] += 1
                self._fail(msg, BACKLOG_FULL)
                return
            remote.backlog.append(msg)
            remote.backlog_bytes += size
            if remote.allowing is None:
                self._start_allow(remote, now)

    def _new_channel(self, remote: Remote) -> Channel:
        name = remote.record.name

        inbox = self.inbox

        def deliver(flow: int, flags: int, payload: bytes) -> None:
            if self.on_message is None:  # the common case, inlined: one call per message
                inbox.append((name, flow, flags, payload))
                self.inbox_bytes += len(payload)
            else:
                self._deliver_to_inbox(name, flow, flags, payload)

        channel = Channel(
            self.datagram_size - _OVERHEAD,
            deliver,
            self._completed,
            held=self._held,
            receive_window=self.receive_window,
            max_message=self.max_message,
            now=self.clock.now(),
            budget=self.hold_budget,
        )
        channel.on_path = self._on_path
        return channel

    def _held(self) -> int:
        return self.inbox_bytes

    def _watch_session(self, remote: Remote, session: Session) -> None:
        """Give an established session's channel its event watch (or take it away)."""
        sink = self._events
        if sink is None or session.remote_index is None:
            session.channel.watch = None
            return
        session.channel.watch = ChannelEvents(
            sink,
            self.clock.now,
            self._born,
            f"{self.local.name}:{session.local_index:08x}",
            f"{remote.name}:{session.remote_index:08x}",
            ("", self.local.name),
            ("", remote.name),
        )

    def _watch_channels(self) -> None:
        for remote in self.remotes.values():
            if remote.session is not None:
                self._watch_session(remote, remote.session)
                remote.session.channel.completed = self._completed

    def _route_of(self, msg: Outgoing) -> tuple[tuple, tuple]:
        remote = self.remotes.get(msg.remote) or self._by_name.get(msg.remote)  # sent to a name or a fingerprint
        name = remote.name if remote is not None else str(msg.remote)
        return ("", "", self.local.name, msg.flow), ("", "", name, msg.flow)

    def _channel_watch(self, to: str) -> ChannelEvents | None:
        session = self._find(to).session
        return session.channel.watch if session is not None else None

    def _completed(self, msg: Outgoing) -> None:
        if self.on_done is not None:
            self.on_done(msg)

    def _fail(self, msg: Outgoing, reason: str) -> None:
        """A message that never reached a channel fails here, and its sender hears (on_done)."""
        msg.fail(reason)
        self._completed(msg)

    def _consumed(self) -> None:
        # Only a channel that advertised a small window may owe news of a
        # bigger one (Channel.window_opened): _flush notes those, so taking
        # messages costs nothing per idle remote.
        starved = self._starved
        if not starved:
            return
        for remote in list(starved):
            session = remote.session
            if session is None:
                del starved[remote]
                continue
            channel = session.channel
            channel.window_opened()
            if channel.ack_owed:
                del starved[remote]  # the ACK going out advertises afresh (_flush notes it again if still small)
                self._flushq[remote] = None

    def _flush(self, now: float) -> None:
        outq = self._outq
        if outq and not self._drain_outq():
            return
        flushq = self._flushq
        if not flushq:
            return
        todo = list(flushq)  # the remotes that may have something to send
        flushq.clear()
        dirty = self._dirty
        send = self.port.send
        for position, remote in enumerate(todo):
            session = remote.session
            if session is None:
                continue
            channel = session.channel
            if not (channel.ack_owed or channel.fresh or channel.ping_owed or channel.resend or channel.path_answers):
                continue  # nothing to send
            if session.remote_index is None or remote.address is None:
                continue
            dirty[remote] = None  # what goes out moves its deadlines
            extra = b""
            if not session.initiator and not session.confirmed:
                extra = ALLOW_ACK.pack(_ALLOW_ACK_KIND, 0, session.local_index)
            if channel.path_answers:
                extra += b"".join(PATH.pack(FrameKind.PATH_RESPONSE, 0, t) for t in channel.path_answers[-4:])
                channel.path_answers.clear()
                channel.ack_owed = True
            address = remote.address
            while channel.ack_owed or channel.ping_owed or ((channel.resend or channel.fresh) and channel.can_send()):
                built = channel.build(extra)
                if built is None:
                    break
                body, frames = built
                counter, datagram = session.seal(body)
                channel.sent(counter, len(body), frames, now)
                remote.last_sent = now
                if outq or not send(datagram, address):  # (Stack._emit, inlined)
                    outq.append((datagram, address, None))
                    self._arm_writable()
                    if channel.advertised < channel.receive_window >> 2:
                        self._starved[remote] = None
                    for rest in todo[position:]:  # their turn comes when the port is writable
                        flushq[rest] = None
                    return
            if channel.advertised < channel.receive_window >> 2:
                self._starved[remote] = None

    # -- receiving -------------------------------------------------------------------

    def _receive(self, data: bytes, address: Address, now: float) -> None:
        if len(data) < HEADER_SIZE or data[0] != MAGIC:
            self.counts["malformed"] += 1
            return
        kind = data[1]
        if kind == _SEALED:
            _, _, _, index, counter = _unpack_header(data)
            entry = self._sessions.get(index)
            if entry is None:
                self.counts["unknown_session"] += 1
                return
            remote, session = entry
            if not session.window.check(counter):
                self.counts["replayed"] += 1
                return
            body = session.open_fresh(data, counter)
            if body is None:
                self.counts["unauthentic"] += 1
                return
            self._authentic(remote, session, body, counter, address, now)
            return
        # Handshakes can make something due at once (see _maybe_due).
        self._urgent = True
        if kind == PacketKind.HELLO:
            if self._afford(now, address):
                self._on_hello(data, address, now)
        elif kind == PacketKind.INITIATE:
            if self._afford(now, address):
                self._on_initiate(data, address, now)
        elif kind == PacketKind.COOKIE:
            self._on_cookie(data, address, now)
        elif kind == PacketKind.JOIN:
            if self._gate.needs_cookie(now, self._loaded()):
                self._ask_cookie(data, address, now)
            elif self._join_affordable(address, now):
                self._on_join(data, address, now)
        elif kind == PacketKind.COOKIED_JOIN:
            self._on_cookied_join(data, address, now)
        elif kind in (PacketKind.JOIN_ACCEPT, PacketKind.JOIN_PEND, PacketKind.JOIN_REFUSE):
            self._on_join_reply(data, address, now)
        elif kind == PacketKind.JOIN_COOKIE:
            self._on_join_cookie(data, address, now)
        else:
            self.counts["malformed"] += 1

    def _afford(self, now: float, address: Address = None) -> bool:
        """Token buckets for public-key work (X25519, Ed25519 ≈ 40-70 µs each).

        Unauthenticated HELLO/INITIATE/JOIN floods cost the stack at most
        ``handshake_rate`` key operations a second; sessions are untouched.
        Each source address also has its own bucket (a tenth of the rate), so
        one flooding address cannot starve everyone else's handshakes.
        """
        per = self._per_source
        rate = self.handshake_rate / 10
        held = per.pop(address, None)
        mine = rate if held is None else min(rate, held[0] + (now - held[1]) * rate)
        if len(per) >= 4096:
            per.pop(next(iter(per)))  # the least recently heard source is forgotten
        if mine < 1.0:
            per[address] = (mine, now)
            self.counts["rate_limited"] += 1
            return False
        per[address] = (mine - 1.0, now)
        tokens = min(self.handshake_rate, self._tokens + (now - self._tokens_at) * self.handshake_rate)
        self._tokens_at = now
        if tokens < 1.0:
            self._tokens = tokens
            # Under a flood, addresses where known remotes were heard (or were
            # configured) keep their own per-source share: a flood from many
            # strangers cannot lock out the estates this one already knows.
            if address in self._places:
                return True
            self.counts["rate_limited"] += 1
            return False
        self._tokens = tokens - 1.0
        return True

    def _authentic(self, remote: Remote, session: Session, body: bytes, counter: int, address: Address, now: float) -> None:
        remote.last_heard = now
        self._dirty[remote] = None
        self._flushq[remote] = None
        if remote.address != address:
            if remote.address is None or (not session.confirmed and not session.initiator):
                # First authentic packet of a session we accepted: it comes
                # from the initiator itself (an INITIATE copy raced from
                # elsewhere may have set the address we answered).
                remote.address = address
            else:
                # Roaming, or an observer racing a copy from elsewhere: the
                # datagram is authentic but its source proves nothing.  Ask
                # that address to answer a challenge first (path validation).
                self._challenge(remote, session, address, now)
        offset = 0
        if body and body[0] == _ALLOW_ACK_KIND and len(body) >= ALLOW_ACK.size:
            _, _, responder_index = ALLOW_ACK.unpack_from(body)
            offset = ALLOW_ACK.size
            if session.initiator and session.remote_index is None:
                session.remote_index = responder_index
                session.confirmed = True
                self._established(remote, session, now)
            session.channel.ack_owed = True
        if not session.confirmed and not session.initiator:
            session.confirmed = True  # the initiator has used the session
        if remote.presence is not _ALIVE and session.remote_index is not None:
            self._set_presence(remote, _ALIVE)
            if remote.backlog and remote.session is session:
                self._take_backlog(remote, session.channel, now)
        channel = session.channel
        self._source = (remote, address)
        try:
            channel.handle(body[offset:] if offset else body, now)
        except WireError:
            self.counts["bad_frames"] += 1
            return
        finally:
            self._source = None
        channel.received(counter)

    def _challenge(self, remote: Remote, session: Session, address: Address, now: float) -> None:
        probes = remote.probes
        held = probes.get(address)
        if held is not None and held[1] > now:
            return  # one challenge at a time per candidate address
        if len(probes) >= 4:
            for old in [a for a, (_, until) in probes.items() if until <= now] or [next(iter(probes))]:
                del probes[old]
        token = int.from_bytes(os.urandom(8), "big")
        probes[address] = (token, now + 1.0)
        body = PATH.pack(FrameKind.PATH_CHALLENGE, 0, token)
        counter, datagram = session.seal(body)
        session.channel.sent(counter, len(body), None, now)
        self._dirty[remote] = None
        self.counts["path_challenges"] += 1
        self._emit(datagram, address)

    def _on_path(self, kind: int, token: int) -> None:
        source = self._source
        if source is None:
            return
        remote, address = source
        if kind == FrameKind.PATH_CHALLENGE:
            session = remote.session
            if session is not None:
                session.channel.path_answers.append(token)
        else:
            held = remote.probes.get(address)
            if held is not None and held[0] == token:
                remote.address = address  # validated: the key holder answers there
                remote.probes.clear()
                self.counts["path_validated"] += 1

    # -- join -------------------------------------------------------------------------

    def _on_join(self, data: bytes, address: Address, now: float) -> None:
        writer = self.keep.writer
        if writer is not None and writer.room() < 4:
            # The disk is behind: admit nothing we could not write (the joiner
            # repeats), and verify nothing we would not admit.
            self.counts["keep_busy"] += 1
            return
        request = hs.parse_join(data)
        if request is None:
            self.counts["bad_join"] += 1
            return
        tag = struct.unpack_from("!I", data, 4)[0]
        verdict = self.keep.admit(request.name, request.role, request.mode, request.verkey, request.pubkey, self.policy, request.stamp, now)
        carried: list[Outgoing] = []
        for note in verdict.events:
            if note.startswith("key-changed "):
                self.counts["key_changed"] += 1  # a bound name with another key: refused
            elif note.startswith("rename-refused "):
                self.counts["rename_refused"] += 1  # an accepted key presenting another name: refused
            elif note.startswith("keep-full "):
                self.counts["keep_full"] += 1  # no record may be evicted for it: refused
            elif note.startswith("rotated "):
                self.counts["rotations"] += 1  # an operator moved the name to this key meanwhile
                carried = self._retire(verdict.evicted[-1])
            self._event_note(note)
        for fp in verdict.evicted:
            self._drop_remote(fp)
        if verdict.successor is not None and verdict.status is not Status.ACCEPTED:
            # The old key of a rotated name joined first: its messages go to the new key.
            self._add_remote(verdict.successor, None).requeue(carried)
        if verdict.status is Status.ACCEPTED:
            kind = PacketKind.JOIN_ACCEPT
            assert verdict.record is not None
            # The JOIN's source address is not recorded: JOINs are signed but
            # replayable, so only an authenticated INITIATE (which the joiner
            # sends next) or session traffic may say where a remote is.
            remote = self._add_remote(verdict.record, None)
            remote.requeue(carried)  # the old key's unsent messages go to the name's new key
            if remote.session is None and remote.presence is not Presence.JOINED:
                self._set_presence(remote, Presence.JOINED)
        elif verdict.status is Status.PENDING:
            kind = PacketKind.JOIN_PEND
        else:
            kind = PacketKind.JOIN_REFUSE
            self.counts["join_refused"] += 1
            self._event_note(f"join refused from {address!r}: {verdict.reason}")
        uid = verdict.record.uid if verdict.record is not None else 0
        reply = hs.build_join_reply(kind, self.keys, self.local.name, self.local.role, self.local.mode, request.nonce, verdict.reason, uid, tag)
        ticket = self.keep.unwritten(verdict.record.fingerprint) if writer is not None and verdict.record is not None else 0
        if ticket:
            # Told only once its record is on disk (see _release_joins), a
            # repeated JOIN as much as the first: tickets only grow, so the
            # queue is in ticket order.
            self._unwritten.append((max(ticket, self._unwritten[-1][0]) if self._unwritten else ticket, reply, address, now + self.allow_timeout))
            return
        self._emit(reply, address)

    def _retire(self, fp: str) -> list[Outgoing]:
        """The name of ``fp`` was rotated to another key: end its session, hand back what it had not delivered."""
        remote = self.remotes.get(fp)
        if remote is None:
            return []
        carried: list[Outgoing] = []
        for session in (remote.session, remote.allowing.session if remote.allowing is not None else None):
            if session is not None:
                self._sessions.pop(session.local_index, None)
        if remote.session is not None:
            carried = remote.session.channel.take_unfinished()
            release(remote.session.channel)  # what it held for delivery leaves the budget with it
            remote.session = None
        carried += remote.backlog
        remote.backlog = []
        remote.backlog_bytes = 0
        remote.record.status = Status.REJECTED  # the object some caller may hold no longer names anyone
        return carried

    def _loaded(self) -> bool:
        """Is this stack short of handshake tokens or of keep writes?  Then every JOIN gets a cookie."""
        writer = self.keep.writer
        return (
            self._tokens < self.handshake_rate / 4
            or len(self._unwritten) > 64
            or (writer is not None and writer.pending > writer.limit // 8)
        )

    def _ask_cookie(self, data: bytes, address: Address, now: float) -> None:
        """Answer a JOIN with its address cookie: no parsing, no key work, no state."""
        if len(data) < hs.MIN_JOIN:
            self.counts["bad_join"] += 1  # never answer more bytes than came
            return
        self.counts["join_cookies"] += 1
        self._emit(build_join_cookie(struct.unpack_from("!I", data, 4)[0], self._gate.cookie(address, now)), address)

    def _on_cookied_join(self, data: bytes, address: Address, now: float) -> None:
        unwrapped = unwrap_join(data)
        if unwrapped is None or not self._gate.valid(address, unwrapped[0], now):
            self.counts["bad_join_cookie"] += 1
            return
        join = unwrapped[1]
        if join[0] != MAGIC or join[1] != PacketKind.JOIN:
            self.counts["bad_join"] += 1
        elif self._join_affordable(address, now):
            self._on_join(join, address, now)

    def _join_affordable(self, address: Address, now: float) -> bool:
        """The join budget (fair per source, capped in all) and then the key-work buckets."""
        if not self._join_budget.take(address, now):
            self.counts["join_limited"] += 1  # the joiner repeats; its address gets its share
            return False
        return self._afford(now, address)

    def _on_join_cookie(self, data: bytes, address: Address, now: float) -> None:
        """The joined estate is loaded: send our JOIN again with its cookie, once per send."""
        parsed = parse_join_cookie(data)
        attempt = self._joining.get(parsed[0]) if parsed is not None else None
        if attempt is None or address != attempt.address or attempt.cookie_used:
            self.counts["stray_join_cookie"] += 1
            return
        attempt.cookie_used = True
        self._emit(wrap_join(attempt.packet, parsed[1]), address)

    def _release_joins(self) -> None:
        """Send the join replies whose keep records are durable now."""
        writer = self.keep.writer
        held = self._unwritten
        durable = writer.durable if writer is not None else 1 << 62
        now = self.clock.now()
        while held and (held[0][0] <= durable or held[0][3] <= now):
            ticket, reply, address, _ = held.popleft()
            if ticket <= durable:
                self._emit(reply, address)
            else:
                self.counts["keep_unwritten"] += 1  # never said, never durable: the joiner repeats

    def _durable_elsewhere(self) -> None:
        """On the writer's thread: wake this stack through its socket pair."""
        wake = self._writer_wake
        if wake is not None:
            try:
                wake[1].send(b"\0")
            except OSError:
                pass  # full (a wake is pending already) or closed

    def _on_durable(self) -> None:
        wake = self._writer_wake
        if wake is not None:
            try:
                while wake[0].recv(4096):
                    pass
            except OSError:
                pass
        self._wake()

    def _on_join_reply(self, data: bytes, address: Address, now: float) -> None:
        tag = struct.unpack_from("!I", data, 4)[0]
        attempt = self._joining.get(tag)
        if attempt is None or address != attempt.address:
            # Only the address we joined may answer: an observer who saw our
            # JOIN cannot refuse or accept it from elsewhere.
            self.counts["stray_join_reply"] += 1
            return
        reply = hs.parse_join_reply(data)
        if reply is None or reply.nonce != attempt.nonce:
            self.counts["bad_join"] += 1
            return
        if reply.kind == PacketKind.JOIN_PEND:
            attempt.result = "pending"
            attempt.reason = reply.reason
            attempt.interval = 1.0
            return
        del self._joining[tag]
        if reply.kind == PacketKind.JOIN_REFUSE:
            attempt.result = "refused"
            attempt.reason = reply.reason
            self._event_note(f"join refused by {address!r}: {reply.reason}")
            return
        # Accepted.  We asked to join this estate, so `never` acts as `once` for it.
        policy = Acceptance.ONCE if self.policy is Acceptance.NEVER else self.policy
        verdict = self.keep.admit(reply.name, reply.role, reply.mode, reply.verkey, reply.pubkey, policy)
        for note in verdict.events:
            self._event_note(note)
        if verdict.status is not Status.ACCEPTED or verdict.record is None:
            attempt.result = "refused"
            attempt.reason = f"we refuse the answering estate: {verdict.reason}"
            self._event_note(attempt.reason)
            return
        attempt.result = "accepted"
        remote = self._add_remote(verdict.record, address)
        if remote.session is None:
            remote.address = address
        if remote.session is None:
            self._set_presence(remote, Presence.JOINED)
            if remote.allowing is None:
                self._start_allow(remote, now)

    # -- allow: initiator --------------------------------------------------------

    def _start_allow(self, remote: Remote, now: float) -> None:
        if remote.address is None:
            return
        if remote.allowing is not None:
            self._allowing.pop(remote.allowing.tag, None)
            if remote.allowing.session is not None:
                self._sessions.pop(remote.allowing.session.local_index, None)
        attempt = _Allowing(_random32(), now, now + self.allow_timeout)
        attempt.packet = hs.build_hello(attempt.short, remote.record.pubkey, attempt.tag)
        remote.allowing = attempt
        self._allowing[attempt.tag] = remote
        self._dirty[remote] = None
        self._urgent = True  # its HELLO is due now

    def _on_cookie(self, data: bytes, address: Address, now: float) -> None:
        tag = struct.unpack_from("!I", data, 4)[0]
        remote = self._allowing.get(tag)
        if remote is None or remote.allowing is None or remote.allowing.stage != "hello":
            self.counts["stray_cookie"] += 1
            return
        attempt = remote.allowing
        opened = hs.open_cookie(data, attempt.short, remote.record.pubkey)
        if opened is None:
            self.counts["bad_cookie"] += 1
            return
        server_short, cookie = opened
        index = self._new_index()
        attempt.packet = hs.build_initiate(attempt.short, self.keys, remote.record.pubkey, server_short, cookie, tag, index)
        shared = hs.session_shared(attempt.short.secret, server_short)
        forward, backward = derive_session_keys(shared, attempt.short.public, server_short)
        attempt.session = Session(
            index,
            None,
            forward,
            backward,
            self._new_channel(remote),
            initiator=True,
            client_short=attempt.short.public,
            created=now,
            scratch=self._scratch,
        )
        attempt.short.secret = b""  # forward secrecy: the short-term secret is done
        self._sessions[index] = (remote, attempt.session)  # can open the responder's packets
        attempt.stage = "initiate"
        attempt.next_send = now
        attempt.interval = 0.1
        self._dirty[remote] = None

    def _new_index(self) -> int:
        while True:
            index = _random32()
            if index not in self._sessions:
                return index

    def _established(self, remote: Remote, session: Session, now: float) -> None:
        """``session`` replaces whatever ``remote`` had; queued messages move in."""
        old = remote.session
        carried: list[Outgoing] = []
        if old is not None and old is not session:
            self._sessions.pop(old.local_index, None)
            carried = old.channel.take_unfinished()
            release(old.channel)  # what it held for delivery leaves the budget with it
        if remote.allowing is not None:
            self._allowing.pop(remote.allowing.tag, None)
            if remote.allowing.session is not None and remote.allowing.session is not session:
                self._sessions.pop(remote.allowing.session.local_index, None)
                release(remote.allowing.session.channel)
            remote.allowing = None
        remote.session = session
        remote.last_heard = now
        self._touch(remote)
        self._urgent = True  # a new session's heartbeat may be due at once
        self._sessions[session.local_index] = (remote, session)
        channel = session.channel
        channel.completed = self._completed  # the recording variant if events were set since it was made
        if self._events is not None:
            self._watch_session(remote, session)
        watch = channel.watch
        for msg in carried:
            channel.submit(msg, now)
            if watch is not None:
                watch.sent(msg)  # under a new id: sequence numbers start again per session
        self._take_backlog(remote, channel, now)
        self._set_presence(remote, Presence.ALLOWED)
        self._event_note(f"allowed {remote.name} session {session.local_index:08x}")
        self.keep.mark_allowed(remote.fingerprint, time.time())

    # -- allow: responder -----------------------------------------------------------

    def _on_hello(self, data: bytes, address: Address, now: float) -> None:
        opened = hs.open_hello(data, self.keys)
        if opened is None:
            self.counts["bad_hello"] += 1
            return
        tag, client_short, shared = opened
        server_short = hs.ShortTerm()
        cookie = self._jar.make(now, client_short, server_short.secret)
        self._emit(hs.build_cookie(shared, tag, server_short, cookie), address)

    def _on_initiate(self, data: bytes, address: Address, now: float) -> None:
        initiate = hs.open_initiate(data, now, self._jar)
        if initiate is None:
            self.counts["bad_initiate"] += 1
            return
        # The record is named by both keys: a JOIN that presented someone
        # else's X25519 key made a record no vouch can ever open.
        # Authenticate (the vouch), then authorize (the keep).
        shared = self._long_shared.get(initiate.client_long) or self.keys.shared(initiate.client_long)
        if not hs.check_vouch(initiate, shared):
            self.counts["bad_vouch"] += 1
            return
        remote = self.remotes.get(fingerprint(initiate.client_verkey, initiate.client_long))
        if remote is None or remote.record.status is not Status.ACCEPTED:
            self.counts["not_accepted"] += 1
            return
        self._long_shared[initiate.client_long] = shared  # cached only for accepted remotes
        current = remote.session
        if self._jar.seen(initiate.client_short):
            if current is not None and not current.initiator and current.client_short == initiate.client_short:
                # The initiator did not hear our ALLOW_ACK yet: say it again,
                # to where this copy came from, without moving the session
                # (an observer racing a copy must not redirect it; the
                # initiator's first sealed packet settles the address).
                self.counts["initiate_repeat"] += 1
                if not current.confirmed and current.remote_index is not None:
                    body = ALLOW_ACK.pack(_ALLOW_ACK_KIND, 0, current.local_index) + _PING
                    counter, datagram = current.seal(body)
                    current.channel.sent(counter, len(body), [], now)
                    self._dirty[remote] = None
                    self._emit(datagram, address)
            else:
                self.counts["replayed"] += 1
            return
        if current is not None and initiate.minted < current.created:
            # Begun before the session we now have (a delayed or crossed
            # allow): taking it would tear down a good session.
            self.counts["stale_initiate"] += 1
            return
        if remote.allowing is not None and self._pubkey < remote.record.pubkey:
            # Simultaneous allow: the smaller long-term key's initiation wins.
            self.counts["allow_collision"] += 1
            return
        if not may_allow(self, remote, now):
            return  # an operator rejected, rotated away or forgot the key since it was loaded
        self._jar.remember(now, initiate.client_short)
        server_public = hs.public_of(initiate.server_short_secret)
        session_key = hs.session_shared(initiate.server_short_secret, initiate.client_short)
        forward, backward = derive_session_keys(session_key, initiate.client_short, server_public)
        session = Session(
            self._new_index(),
            initiate.index,
            backward,
            forward,
            self._new_channel(remote),
            initiator=False,
            client_short=initiate.client_short,
            created=now,
            scratch=self._scratch,
        )
        remote.address = address  # authenticated by the vouch
        self._established(remote, session, now)
        session.channel.ack_owed = True  # carries the ALLOW_ACK out now
        self._flushq[remote] = None

    # -- timers -------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        deadline: float | None = None
        if self._joining:
            for attempt in self._joining.values():
                when = min(attempt.next_send, attempt.deadline)
                if deadline is None or when < deadline:
                    deadline = when
        if self._dirty:
            self._settle()
        heap = self._due_heap
        while heap:
            when, _, remote = heap[0]
            if remote.due == when:
                if deadline is None or when < deadline:
                    deadline = when
                break
            heapq.heappop(heap)  # stale: that remote's deadline moved (or it went)
        return deadline

    def _maybe_due(self, now: float) -> bool:
        """Stack.service after reading: may a timer be due at ``now``?

        Without settling the remotes touched since (the round trip's reply
        is waiting): what reading sealed packets changes moves deadlines
        later or to a moment still ahead (a delayed ACK, a timeout), and
        the heap holds every remote's earlier deadline, stale or not.  What
        can make something due at once (a handshake packet, a new allow or
        session, a zero timeout) sets ``_urgent``: then all is settled.
        """
        if self._urgent or self._joining:
            self._urgent = False
            deadline = self.next_deadline()
            return deadline is not None and deadline <= now
        heap = self._due_heap
        return bool(heap) and heap[0][0] <= now

    def _settle(self) -> None:
        """Recompute the deadlines of the remotes touched since; the heap gets the new ones."""
        heap = self._due_heap
        count = self._due_n
        push = heapq.heappush
        for remote in self._dirty:
            when = self._remote_deadline(remote)
            if when != remote.due:
                remote.due = when
                if when is not None:
                    push(heap, (when, next(count), remote))
        self._dirty.clear()
        if len(heap) > 2 * len(self.remotes) + 64:
            # Stale entries pile up under traffic (deadlines moving earlier):
            # rebuild from the live ones, O(n) once per O(n) pushes.
            heap[:] = [(r.due, next(count), r) for r in self.remotes.values() if r.due is not None]
            heapq.heapify(heap)

    def _remote_deadline(self, remote: Remote) -> float | None:
        """The earliest time anything of ``remote``'s is due (what ``_remote_timers`` runs)."""
        deadline: float | None = None
        alive_interval = self.alive_interval
        allowing = remote.allowing
        if allowing is not None:
            when = min(allowing.next_send, allowing.deadline)
            if deadline is None or when < deadline:
                deadline = when
        session = remote.session
        if session is not None and session.remote_index is not None:
            when = session.channel.next_deadline()
            if when is not None and (deadline is None or when < deadline):
                deadline = when
            last_heard = remote.last_heard
            last_sent = remote.last_sent
            quiet = last_sent if last_sent < last_heard else last_heard
            last_ping = remote.last_ping
            when = (quiet if quiet > last_ping else last_ping) + alive_interval
            if remote.presence is not _DEAD:
                dead = last_heard + self.dead_after
                if dead < when:
                    when = dead
            elif (session.channel.pending_count or remote.backlog) and allowing is None:
                when = min(when, remote.next_allow)
            if deadline is None or when < deadline:
                deadline = when
        elif remote.backlog and allowing is None and remote.address is not None:
            when = remote.next_allow
            if deadline is None or when < deadline:
                deadline = when
        if remote.backlog:
            for msg in remote.backlog:
                if msg.deadline is not None and (deadline is None or msg.deadline < deadline):
                    deadline = msg.deadline
        return deadline

    def _timers(self, now: float) -> None:
        for tag, attempt in list(self._joining.items()):
            if now >= attempt.deadline:
                del self._joining[tag]
                attempt.result = attempt.result if attempt.result == "pending" else "timeout"
                self._event_note(f"join to {attempt.address!r} timed out")
            elif now >= attempt.next_send:
                attempt.cookie_used = False
                self._emit(attempt.packet, attempt.address)
                attempt.next_send = now + attempt.interval
                attempt.interval = min(attempt.interval * 2, 1.0)
        if self._dirty:
            self._settle()
        heap = self._due_heap
        due = []
        while heap and heap[0][0] <= now:
            when, _, remote = heapq.heappop(heap)
            if remote.due == when:  # else stale, or a copy of an entry taken already
                remote.due = None
                due.append(remote)
        dirty = self._dirty
        flushq = self._flushq
        for remote in due:
            if self.remotes.get(remote.record.fingerprint) is not remote:
                continue
            self._remote_timers(remote, now)
            dirty[remote] = None
            flushq[remote] = None
        if now >= self._sweep.at and self._sessions:
            self._sweep.run(self, now)

    def _remote_timers(self, remote: Remote, now: float) -> None:
        """Run what is due of ``remote``'s: allow resends and timeout, channel timers, presence, heartbeat."""
        allowing = remote.allowing
        if allowing is not None:
            if now >= allowing.deadline:
                self._allow_failed(remote, now)
            elif now >= allowing.next_send and remote.address is not None:
                self._emit(allowing.packet, remote.address)
                allowing.next_send = now + allowing.interval
                allowing.interval = min(allowing.interval * 2, 1.0)
        session = remote.session
        if session is not None and session.remote_index is not None:
            if now >= remote.last_heard + self.idle_after:
                self._reap(remote, session, now)
                return
            channel = session.channel
            when = channel.next_deadline()
            if when is not None and when <= now:
                channel.poll(now)
            if remote.presence is not Presence.DEAD and now >= remote.last_heard + self.dead_after:
                self._set_presence(remote, Presence.DEAD)
                remote.next_allow = now
            if (
                remote.presence is Presence.DEAD
                and (channel.pending_count or remote.backlog)
                and remote.allowing is None
                and now >= remote.next_allow
            ):
                self._start_allow(remote, now)  # the peer may have restarted
            # same expression as _remote_deadline(): a due timer must always make progress
            if now >= max(min(remote.last_sent, remote.last_heard), remote.last_ping) + self.alive_interval:
                channel.ping_owed = True
                remote.last_ping = now
                channel.shrink()  # quiet for a heartbeat: empty send queues go
        elif remote.backlog and remote.allowing is None and now >= remote.next_allow:
            self._start_allow(remote, now)
        if remote.backlog:
            self._expire_backlog(remote, now, "no session (timeout before allow)")

    def _take_backlog(self, remote: Remote, channel: Channel, now: float) -> None:
        """What waited for ``remote`` goes into its session's channel, in order."""
        backlog, remote.backlog = remote.backlog, []
        remote.backlog_bytes = 0
        watch = channel.watch
        for msg in backlog:
            channel.submit(msg, now)
            if watch is not None:
                watch.sent(msg)
        self._touch(remote)

    def _reap(self, remote: Remote, session: Session, now: float) -> None:
        """``remote`` was silent past ``idle_after``: its session goes, and what it held with it.

        Messages not yet delivered wait in the backlog for the next allow
        (within the backlog's bounds and their own timeouts); the peer, if it
        comes back, allows anew -- a reaped session id is unknown to this stack.
        """
        self._sessions.pop(session.local_index, None)
        remote.session = None
        channel = session.channel
        carried = channel.take_unfinished()
        freed = release(channel)
        remote.requeue(carried, front=True)
        remote.next_allow = now
        self._starved.pop(remote, None)
        self.counts["reaped"] += 1
        self._set_presence(remote, _DEAD)
        self._event_note(f"reaped {remote.name} session {session.local_index:08x}: silent {now - remote.last_heard:.0f} s, {freed} B held")
        self._expire_backlog(remote, now, "no session (timeout before allow)")

    def _expire_backlog(self, remote: Remote, now: float, reason: str) -> None:
        expired = [m for m in remote.backlog if m.deadline is not None and m.deadline <= now]
        if expired:
            remote.backlog = [m for m in remote.backlog if m.deadline is None or m.deadline > now]
            remote.backlog_bytes = sum(len(m.data) for m in remote.backlog)
            for msg in expired:
                self._fail(msg, reason)

    def _allow_failed(self, remote: Remote, now: float) -> None:
        attempt = remote.allowing
        assert attempt is not None
        self._allowing.pop(attempt.tag, None)
        if attempt.session is not None:
            self._sessions.pop(attempt.session.local_index, None)
            release(attempt.session.channel)
        remote.allowing = None
        remote.next_allow = now + self.allow_timeout
        self._event_note(f"allow with {remote.name} timed out")
        self._expire_backlog(remote, now, "no session (allow timed out)")

    def service(self) -> None:
        super().service()
        if self._unwritten:
            self._release_joins()

    def start(self) -> None:
        super().start()
        if self.keep.writer is not None and self.scheduler is not None and self._writer_wake is None:
            # The writer's thread must not touch the scheduler: it writes a
            # byte, the scheduler's selector sees it and this stack wakes.
            receive, send = socket.socketpair()
            receive.setblocking(False)
            send.setblocking(False)
            self._writer_wake = (receive, send)
            self.scheduler.add_reader(receive, self._on_durable)
            self.keep.writer.listen(self._durable_elsewhere)

    def close(self) -> None:
        if self._closed:
            return
        if self._writer_wake is not None:
            if self.keep.writer is not None:
                self.keep.writer.unlisten(self._durable_elsewhere)
            try:
                self.scheduler.remove_reader(self._writer_wake[0])
            except (KeyError, ValueError):
                pass
            for end in self._writer_wake:
                end.close()
            self._writer_wake = None
        self._close_remotes()

    def _close_remotes(self) -> None:
        # Closed first: what the failures below provoke (the router answers
        # each with an error report) raises ClosedError at once instead of
        # queueing on a stack that will never send it.
        super().close()
        for remote in self.remotes.values():
            if remote.session is not None:
                remote.session.channel.fail_all("stack closed")
                release(remote.session.channel)
            backlog, remote.backlog = remote.backlog, []
            remote.backlog_bytes = 0
            for msg in backlog:  # failed like every other failure: on_done hears of it
                self._fail(msg, "stack closed")
