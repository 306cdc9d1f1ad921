"""RoadStack: secure, reliable messages between estates over UDP.

Transactions (RAET's names): *join* introduces long-term keys and applies
the acceptance policy; *allow* runs the CurveCP-style handshake and makes a
session; *alive* heartbeats keep presence current; *message* is the
reliable transport of reliable.py inside sealed datagrams.

Rules that hold everywhere below:

* Nothing changes session state before a datagram authenticates: sealed
  packets are looked up by session id, checked against the replay window,
  and opened; only then are the remote's address, presence or link
  touched.  HELLO and COOKIE-answering are stateless.
* Every parse error is counted in ``counts`` and the datagram dropped.

The stack is split along those roles, each a small object holding a
reference to the stack: join, joiner and joinent (roadjoin.py); allow,
initiator and responder (roadallow.py); per-remote deadlines (roaddue.py);
handshake rate limiting (roadrate.py); path validation (roadpath.py).
What stays here is what every datagram and message crosses -- the sealed
receive path, submit and flush -- plus the table of remotes, so the hot
path calls no role at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flowcast.transport.admission import Allowance, RoadAdmission
from flowcast.transport.budget import (
    DEFAULT_BACKLOG_BYTES,
    DEFAULT_BACKLOG_MESSAGES,
    DEFAULT_HOLD_BUDGET,
    DEFAULT_IDLE_AFTER,
    DEFAULT_INCOMPLETE_AFTER,
    HoldBudget,
    release,
)
from flowcast.transport.crypto import HARDWARE_AES, TAG_ROOM, Scratch
from flowcast.transport.keep import Acceptance, Keep, RemoteRecord, Status
from flowcast.transport.port import Address, DatagramPort
from flowcast.transport.presence import Presence
from flowcast.transport.reliable import Link, Outgoing
from flowcast.transport.revoke import Sweep
from flowcast.transport.hooks import Replaced
from flowcast.transport.roadallow import Allows
from flowcast.transport.roaddue import Deadlines
from flowcast.transport.replybudget import DEFAULT_REPLY_RATE, DEFAULT_REPLY_SOURCE_RATE
from flowcast.transport.roadjoin import Joins
from flowcast.transport.roadmtu import MIN_DATAGRAM, datagram_for
from flowcast.transport.roadpath import PathCheck
from flowcast.transport.roadrate import HandshakeRate
from flowcast.transport.roadremote import JoinAttempt, Remote
from flowcast.transport.roadtable import REMOTE_FORGOTTEN, RemoteTable
from flowcast.transport.session import Session
from flowcast.transport.linkevents import LinkEvents, EventSink
from flowcast.transport.stack import INBOX_ENTRY, Stack
from flowcast.transport.roadreceive import RoadReceiving
from flowcast.transport.roadsend import BACKLOG_FULL, DEFAULT_SEND_QUEUE_BYTES, SEND_QUEUE_FULL, RoadSending
from flowcast.transport.wire import ALLOW_ACK, F_RAW, HEADER_SIZE, PATH, ChunkKind

__all__ = ["RoadStack", "Remote", "JoinAttempt", "BACKLOG_FULL", "SEND_QUEUE_FULL", "REMOTE_FORGOTTEN"]


_ALLOW_ACK_KIND = ChunkKind.ALLOW_ACK
_OVERHEAD = HEADER_SIZE + TAG_ROOM  # header + tag, whichever cipher seals (crypto.py)
_BATCH = 64  # datagrams of one remote handed to the port at once: GSO's most per call


class RoadStack(RoadSending, RoadReceiving, Stack):
    """One estate's UDP stack.

    ``keep`` must hold local keys (``keep.ensure_local(name)``).  ``policy``
    decides joins from unknown keys.  ``datagram_size`` sets the datagram
    size for every remote (default: per remote, what the port carries on
    loopback and 1,232 bytes to another host: roadmtu.py).  With ``scheduler`` the stack runs as a micro-thread.
    ``hold_budget`` bounds what all sessions hold for order or reassembly,
    ``incomplete_after`` and ``idle_after`` when incomplete messages and
    silent sessions go, ``backlog_messages``/``backlog_bytes`` what waits for
    one remote that is down (budget.py; docs/protocol.md section 10), ``send_queue_bytes`` what waits
    for one remote with a live session (roadsend.py).
    ``events`` (any :class:`~flowcast.transport.stack.EventSink`, such as an
    export Recorder) records message events and presence changes.
    ``join_cookies`` (``load``, ``always``, ``never``) and ``join_rate`` say
    when a JOIN must first prove its source address (joingate.py);
    ``join_work_rate`` caps the JOINs a second that are verified and
    admitted, shared fairly between source addresses, each at most
    ``join_source_rate`` (joinbudget.py); ``reply_bytes`` and
    ``reply_source_bytes`` cap, a second, what goes to addresses not yet
    proven (cookies, in all and per address: replybudget.py).  ``aegis`` (default: where this
    machine has hardware AES) offers AEGIS-256 in handshakes, fixed for the
    stack's life so a handshake's two ends never decide on different offers
    (crypto.py says why never without hardware AES).  A keep
    with a :class:`~flowcast.transport.keepwriter.KeepWriter` keeps disk
    work off this stack's thread; joins are then acknowledged once durable.
    """

    HOOKS = (*Stack.HOOKS, "presence", "note")  # presence: (name, old, new); note: a line of self.events
    on_presence = Replaced("presence")
    on_event = Replaced("note")

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
        send_queue_bytes: int = DEFAULT_SEND_QUEUE_BYTES,
        handshake_rate: float = 2000.0,
        events: EventSink | None = None,
        join_cookies: str = "load",
        join_rate: float = 50.0,
        join_work_rate: float = 100.0,
        join_source_rate: float = 20.0,
        reply_bytes: float = DEFAULT_REPLY_RATE,
        reply_source_bytes: float = DEFAULT_REPLY_SOURCE_RATE,
        aegis: bool | None = None,
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
        if datagram_size is not None and datagram_size < MIN_DATAGRAM:
            raise ValueError(f"datagram_size must be at least {MIN_DATAGRAM}")
        #: What the road was told (None: per remote, roadmtu.datagram_for), and the largest it may send.
        self.configured_datagram = datagram_size
        self.datagram_size = min(datagram_size or port.max_datagram, port.max_datagram)
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
        if send_queue_bytes < 1:
            raise ValueError("send_queue_bytes must be positive")
        self.send_queue_bytes = int(send_queue_bytes)
        self.remotes: dict[str, Remote] = {}  # by fingerprint
        self._by_name: dict[str, Remote] = {}
        self._forget_last()  # roadsend.py's cache of the last send's remote: empty
        self._sessions: dict[int, tuple[Remote, Session]] = {}  # live and half-made, by our session id
        self._long_shared: dict[bytes, bytes] = {}
        self._scratch = Scratch()  # one small-packet buffer for all sessions (2 KB each otherwise)
        if aegis is None:
            aegis = HARDWARE_AES
        elif aegis and not HARDWARE_AES:
            raise ValueError("aegis=True needs hardware AES, and this machine has none libsodium can use")
        self._aegis = bool(aegis)
        # Remotes whose deadline may have moved wait in _dirty (roaddue.py
        # settles them), those that may have something to send in _flushq.
        # A wake costs what it touches, not the number of remotes.
        self._dirty: dict[Remote, None] = {}
        self._flushq: dict[Remote, None] = {}
        self._starved: dict[Remote, None] = {}  # advertised a window under a quarter (see _consumed)
        self._urgent = True  # a deadline may have moved to now or before (see Deadlines.maybe_due)
        self._source: tuple[Remote, Address] | None = None  # of the sealed datagram being read (roadpath.py)
        self._places: dict[Address, int] = {}  # address -> how many remotes are there (Remote.address)
        self.handshake_rate = float(handshake_rate)
        # The roles (RAET's transactions), each holding this stack.
        self._rate = HandshakeRate(self.handshake_rate, self.clock.now(), self._places, self.counts)
        self._joins = Joins(
            self, cookies=join_cookies, rate=join_rate, work_rate=join_work_rate, source_rate=join_source_rate,
            reply_rate=reply_bytes, reply_source_rate=reply_source_bytes,
        )
        self._allows = Allows(self)
        self._due = Deadlines(self)
        self._paths = PathCheck(self)
        self._table = RemoteTable(self)
        self._admission = RoadAdmission(self)
        self._allowance: Allowance | None = None  # the admission's, read per datagram (roadreceive.py)
        # Stack's timer hooks run at every wake: bound straight to the
        # deadlines' own methods, no call in between (a delegating method
        # cost 40 ns a call, 6% of an idle service).
        self.next_deadline = self._due.next_deadline  # type: ignore[method-assign]
        self._maybe_due = self._due.maybe_due  # type: ignore[method-assign]
        self._timers = self._due.timers  # type: ignore[method-assign]
        self._unwritten = self._joins.unwritten  # looked at after every service
        # The handshake handlers, where _receive finds them (a fuzzer counts them here).
        self._on_join = self._joins.on_join
        self._on_join_reply = self._joins.on_join_reply
        self._on_hello = self._allows.on_hello
        self._on_cookie = self._allows.on_cookie
        self._on_initiate = self._allows.on_initiate
        self._sweep = Sweep()  # live sessions' keys looked at on disk (revoke.py)
        self.events: list[str] = []
        for record in keep.remotes():
            if record.status is Status.ACCEPTED:
                self._table.add(record, None)
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
        attempt = self._joins.join(address, timeout)
        self._wake()
        return attempt

    def allow(self, remote: str, address: Address | None = None) -> None:
        """Start a session with a known, accepted remote (name or fingerprint)."""
        target = self._find(remote)
        if address is not None:
            target.address = address
        self._allows.start(target, self.clock.now())
        self._wake()

    def add_remote(self, record: RemoteRecord, address: Address | None = None) -> Remote:
        """Trust ``record`` (stored in the keep as accepted) and remember its address.

        A record the keep already holds (a pending join the operator now
        trusts) changes status through the keep, so its name is bound in
        the keep's index and the change is written: set on the object alone,
        the name stayed unbound and a restart found the record pending.
        """
        record.status = Status.ACCEPTED
        stored = self.keep.get(record.fingerprint)
        if stored is None:
            stored = self.keep.add(record)
        elif stored.status is not Status.ACCEPTED:
            stored = self.keep.set_status(stored.fingerprint, Status.ACCEPTED)
        return self._table.add(stored, address)

    def set_allowance(self, allowance: Allowance | None) -> None:
        """Ask ``allowance`` (the layer above: a router) what each remote may send, before holding or
        decoding any of it; None: every remote may send what ``max_message`` lets (admission.py)."""
        self._allowance = allowance
        self._admission.set(allowance)

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
                total += remote.session.link.pending_count
        return total

    # -- remotes -------------------------------------------------------------------

    def _find(self, text: str) -> Remote:
        remote = self.remotes.get(text) or self._by_name.get(text)
        if remote is None:
            raise KeyError(f"no accepted remote {text[:64]!r}")
        return remote

    def _touch(self, remote: Remote) -> None:
        """``remote``'s deadline may have moved and it may have something to send."""
        self._dirty[remote] = None
        self._flushq[remote] = None

    def _event_note(self, text: str) -> None:
        self.events.append(text)
        if len(self.events) > 1000:
            del self.events[:500]
        note = self.hooks.note
        if note is not None:
            try:
                note(text)
            except Exception:  # noqa: BLE001 - a listener's bug: logged and removed (hooks.py)
                self.hooks.failed("note", note)

    def _set_presence(self, remote: Remote, new: Presence) -> None:
        old = remote.presence
        if old is new:
            return
        remote.presence = new
        presence = self.hooks.presence
        if presence is not None:
            try:
                presence(remote.name, old, new)
            except Exception:  # noqa: BLE001 - a listener's bug: logged and removed (hooks.py)
                self.hooks.failed("presence", presence)

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()

    # -- sending: roadsend.py (send_bytes, _submit) ------------------------------------

    def _new_link(self, remote: Remote) -> Link:
        name = remote.record.name

        inbox = self.inbox
        hooks = self.hooks
        drop = self._admission.drop

        def deliver(stream: int, flags: int, payload: bytes) -> None:
            admits = remote.admits
            if admits >= 0 and (len(payload) > admits or not flags & F_RAW):  # before a listener decodes it
                drop(remote, flags, payload)
                return
            if hooks.message is None:  # the common case, inlined: one call per message
                inbox.append((name, stream, flags, payload))
                self.inbox_bytes += len(payload) + INBOX_ENTRY
            else:
                self._deliver_to_inbox(name, stream, flags, payload)

        link = Link(
            datagram_for(remote.address, self.configured_datagram, self.port.max_datagram) - _OVERHEAD,
            deliver,
            self._done_call(),
            held=self._held,
            receive_window=self.receive_window,
            max_message=self.max_message,
            now=self.clock.now(),
            budget=self.hold_budget,
        )
        link.on_path = self._paths.on_path
        self._admission.fit(remote, link)
        return link

    def _held(self) -> int:
        return self.inbox_bytes

    def _watch_session(self, remote: Remote, session: Session) -> None:
        """Give an established session's link its event watch (or take it away)."""
        sink = self._events
        if sink is None or session.remote_index is None:
            session.link.watch = None
            return
        session.link.watch = LinkEvents(
            sink,
            self.clock.now,
            self._born,
            f"{self.local.name}:{session.local_index:08x}",
            f"{remote.name}:{session.remote_index:08x}",
            ("", self.local.name),
            ("", remote.name),
        )

    def _watch_links(self) -> None:
        for remote in self.remotes.values():
            if remote.session is not None:
                self._watch_session(remote, remote.session)

    def _links(self) -> Iterable[Link]:
        return [session.link for _, session in self._sessions.values()]

    def _route_of(self, msg: Outgoing) -> tuple[tuple, tuple]:
        remote = self.remotes.get(msg.remote) or self._by_name.get(msg.remote)  # sent to a name or a fingerprint
        name = remote.name if remote is not None else str(msg.remote)
        return ("", "", self.local.name, msg.stream), ("", "", name, msg.stream)

    def _link_watch(self, to: str) -> LinkEvents | None:
        session = self._find(to).session
        return session.link.watch if session is not None else None

    def _fail(self, msg: Outgoing, reason: str) -> None:
        """A message that never reached a link fails here, and its sender hears (on_done)."""
        msg.fail(reason)
        self._completed(msg)

    def _consumed(self) -> None:
        # Only a link that advertised a small window may owe news of a
        # bigger one (Link.window_opened): _flush notes those, so taking
        # messages costs nothing per idle remote.
        starved = self._starved
        if not starved:
            return
        for remote in list(starved):
            session = remote.session
            if session is None:
                del starved[remote]
                continue
            link = session.link
            link.window_opened()
            if link.ack_owed:
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
            link = session.link
            if not (link.ack_owed or link.fresh or link.ping_owed or link.resend or link.path_answers):
                continue  # nothing to send
            if session.remote_index is None or remote.address is None:
                continue
            dirty[remote] = None  # what goes out moves its deadlines
            extra = b""
            if not session.initiator and not session.confirmed:
                extra = ALLOW_ACK.pack(_ALLOW_ACK_KIND, 0, session.local_index)
            if link.path_answers:
                extra += b"".join(PATH.pack(ChunkKind.PATH_RESPONSE, 0, t) for t in link.path_answers[-4:])
                link.path_answers.clear()
                link.ack_owed = True
            address = remote.address
            batch: list[bytes] = []  # this remote's datagrams, handed over together (GSO) at the end or at 64
            while link.ack_owed or link.ping_owed or ((link.resend or link.fresh) and link.can_send()):
                run = None if extra else link.next_segments(_BATCH - len(batch))  # bulk: many bodies per call
                if run:
                    first, datagrams = session.seal_run([body for body, _ in run])
                    link.sent_run(first, run, now)
                    batch += datagrams
                else:
                    built = link.build(extra)
                    if built is None:
                        break
                    # Once per flush: a segment fills a whole body (Sender.segsize), so control
                    # chunks put before every body would leave no room for one, ever.
                    extra = b""
                    body, chunks = built
                    counter, datagram = session.seal(body)
                    link.sent(counter, len(body), chunks, now)
                    batch.append(datagram)
                remote.last_sent = now
                if len(batch) == _BATCH:
                    full = not self._emit_batch(batch, address)  # what the port did not take is queued
                    batch = []
                    if full:
                        break
            if len(batch) == 1 and not outq:  # the common small case: Stack._emit, inlined
                if not send(batch[0], address):
                    outq.append((batch[0], address, None))
                    self._arm_writable()
            elif batch:
                self._emit_batch(batch, address)
            if outq:
                if link.advertised < link.receive_window >> 2:
                    self._starved[remote] = None
                for rest in todo[position:]:  # their turn comes when the port is writable
                    flushq[rest] = None
                return
            if link.advertised < link.receive_window >> 2:
                self._starved[remote] = None

    @property
    def aegis(self) -> bool:
        """Whether this stack offers AEGIS-256 (a session uses it when both ends offer it: crypto.py)."""
        return self._aegis

    # -- running ---------------------------------------------------------------------

    def service(self) -> None:
        super().service()
        if self._unwritten:
            self._joins.release()

    def start(self) -> None:
        super().start()
        self._joins.start()  # the keep writer's wake, with a scheduler

    def close(self) -> None:
        if self._closed:
            return
        self._joins.close()
        self._close_remotes()

    def _close_remotes(self) -> None:
        # Closed first: what the failures below provoke (the router answers
        # each with an error report) raises ClosedError at once instead of
        # queueing on a stack that will never send it.
        super().close()
        for remote in self.remotes.values():
            if remote.session is not None:
                remote.session.link.fail_all("stack closed")
                release(remote.session.link)
            backlog, remote.backlog = remote.backlog, []
            remote.backlog_bytes = 0
            for msg in backlog:  # failed like every other failure: on_done hears of it
                self._fail(msg, "stack closed")
