"""Joins: RAET's *join* transaction, joiner and joinent sides.

The joiner sends a signed JOIN (its name, role, mode and long-term keys)
and repeats it until a signed reply comes from the address it joined:
JOIN_ACCEPT (then it allows at once), JOIN_PEND (an operator must decide;
it keeps asking, slower) or JOIN_REFUSE.  The joinent lets the keep decide
by its acceptance policy (keep.py), after two gates that keep a flood
cheap: the join gate's address cookies (joingate.py) and the join budget
(joinbudget.py), then the stack's handshake buckets (roadrate.py).  What it
answers an address that has not proven it receives -- a cookie, or the
reply to a JOIN let through without one -- is spent from the reply budget
(replybudget.py): capped in bytes, fair per address, never more than three
times what came from there.

With a keep writer (keepwriter.py) a reply is held until its record is
durable: a joiner told "accepted" is never forgotten by a crash.  The
writer's thread wakes the stack through a socket pair; it never touches
the scheduler.
"""

from __future__ import annotations

import os
import socket
from collections import deque
from typing import TYPE_CHECKING

from flowcast.transport import handshake as hs
from flowcast.transport.budget import release
from flowcast.transport.joinbudget import JoinBudget
from flowcast.transport.joingate import COOKIE_LEN, JoinGate, build_join_cookie, parse_join_cookie, unwrap_join, wrap_join
from flowcast.transport.keep import Acceptance, Status
from flowcast.transport.port import Address
from flowcast.transport.presence import Presence
from flowcast.transport.reliable import Outgoing
from flowcast.transport.replybudget import DEFAULT_REPLY_RATE, DEFAULT_REPLY_SOURCE_RATE, ReplyBudget
from flowcast.transport.roadremote import JoinAttempt, random32
from flowcast.transport.wire import HEADER_SIZE, MAGIC, PacketKind

if TYPE_CHECKING:
    from flowcast.transport.road import RoadStack

__all__ = ["Joins"]


def _tag(data: bytes) -> int:
    return int.from_bytes(data[4:8], "big")


class Joins:
    """The joins of one road: those it sent, and the gates and keep-write queue of those it answers."""


    def __init__(
        self,
        stack: RoadStack,
        *,
        cookies: str,
        rate: float,
        work_rate: float,
        source_rate: float,
        reply_rate: float = DEFAULT_REPLY_RATE,
        reply_source_rate: float = DEFAULT_REPLY_SOURCE_RATE,
    ) -> None:
        self.stack = stack
        self.attempts: dict[int, JoinAttempt] = {}  # joins this stack sent, by tag
        self.gate = JoinGate(mode=cookies, rate=rate)
        self.budget = JoinBudget(work_rate, per_source=source_rate)
        self.replies = ReplyBudget(reply_rate, per_source=reply_source_rate)
        self._unproven: Address | None = None  # the source of the JOIN on_join answers, while it has proven nothing
        # Join replies waiting for their keep records to be durable: (ticket, datagram, address, until).
        self.unwritten: deque[tuple[int, bytes, Address, float]] = deque()
        self._wake: tuple[socket.socket, socket.socket] | None = None

    # -- joiner ----------------------------------------------------------------------

    def join(self, address: Address, timeout: float) -> JoinAttempt:
        stack = self.stack
        now = stack.clock.now()
        tag = random32()
        nonce = os.urandom(16)
        local = stack.local
        packet = hs.build_join(stack.keys, local.name, local.role, local.mode, nonce, tag)
        attempt = JoinAttempt(tag, address, packet, nonce, now, now + timeout)
        self.attempts[tag] = attempt
        return attempt

    def next_deadline(self) -> float | None:
        deadline: float | None = None
        for attempt in self.attempts.values():
            when = min(attempt.next_send, attempt.deadline)
            if deadline is None or when < deadline:
                deadline = when
        return deadline

    def timers(self, now: float) -> None:
        """Resend what is due (back-off doubling to 1 s); time out what is past its deadline."""
        attempts = self.attempts
        if not attempts:
            return
        stack = self.stack
        for tag, attempt in list(attempts.items()):
            if now >= attempt.deadline:
                del attempts[tag]
                attempt.result = attempt.result if attempt.result == "pending" else "timeout"
                stack._event_note(f"join to {attempt.address!r} timed out")
            elif now >= attempt.next_send:
                attempt.cookie_used = False
                stack._emit(attempt.packet, attempt.address)
                attempt.next_send = now + attempt.interval
                attempt.interval = min(attempt.interval * 2, 1.0)

    def on_join_cookie(self, data: bytes, address: Address, now: float) -> None:
        """The joined estate is loaded: send our JOIN again with its cookie, once per send."""
        parsed = parse_join_cookie(data)
        attempt = self.attempts.get(parsed[0]) if parsed is not None else None
        if attempt is None or address != attempt.address or attempt.cookie_used:
            self.stack.counts["stray_join_cookie"] += 1
            return
        attempt.cookie_used = True
        self.stack._emit(wrap_join(attempt.packet, parsed[1]), address)

    def on_join_reply(self, data: bytes, address: Address, now: float) -> None:
        stack = self.stack
        tag = _tag(data)
        attempt = self.attempts.get(tag)
        if attempt is None or address != attempt.address:
            # Only the address we joined may answer: an observer who saw our
            # JOIN cannot refuse or accept it from elsewhere.
            stack.counts["stray_join_reply"] += 1
            return
        reply = hs.parse_join_reply(data)
        if reply is None or reply.nonce != attempt.nonce:
            stack.counts["bad_join"] += 1
            return
        if reply.kind == PacketKind.JOIN_PEND:
            attempt.result = "pending"
            attempt.reason = reply.reason
            attempt.interval = 1.0
            return
        del self.attempts[tag]
        if reply.kind == PacketKind.JOIN_REFUSE:
            attempt.result = "refused"
            attempt.reason = reply.reason
            stack._event_note(f"join refused by {address!r}: {reply.reason}")
            return
        # Accepted.  We asked to join this estate, so `never` acts as `once` for it.
        policy = Acceptance.ONCE if stack.policy is Acceptance.NEVER else stack.policy
        verdict = stack.keep.admit(reply.name, reply.role, reply.mode, reply.verkey, reply.pubkey, policy)
        for note in verdict.events:
            stack._event_note(note)
        if verdict.status is not Status.ACCEPTED or verdict.record is None:
            attempt.result = "refused"
            attempt.reason = f"we refuse the answering estate: {verdict.reason}"
            stack._event_note(attempt.reason)
            return
        attempt.result = "accepted"
        remote = stack._table.add(verdict.record, address)
        if remote.session is None:
            remote.address = address
        if remote.session is None:
            stack._set_presence(remote, Presence.JOINED)
            if remote.allowing is None:
                stack._allows.start(remote, now)

    # -- joinent ---------------------------------------------------------------------

    def receive_join(self, data: bytes, address: Address, now: float) -> None:
        """A JOIN with no cookie: asked for one under load, else through the budget to ``on_join``."""
        self.replies.heard(address, len(data))
        if self.gate.needs_cookie(now, self.loaded()):
            self.ask_cookie(data, address, now)
        elif self.affordable(address, now):
            self._unproven = address  # its reply is spent from the reply budget
            try:
                self.stack._on_join(data, address, now)
            finally:
                self._unproven = None

    def _may_answer(self, address: Address, size: int, now: float, *, rated: bool = True) -> bool:
        """Spend ``size`` bytes of the reply budget for ``address`` (unproven); counted in the stack if refused."""
        replies = self.replies
        counts = replies.counts
        before = counts["reply_limited"], counts["amplification_limited"]
        if replies.take(address, size, now, rated=rated):
            return True
        stack_counts = self.stack.counts
        stack_counts["reply_limited"] += counts["reply_limited"] - before[0]
        stack_counts["amplification_limited"] += counts["amplification_limited"] - before[1]
        return False

    def on_join(self, data: bytes, address: Address, now: float) -> None:
        stack = self.stack
        writer = stack.keep.writer
        if writer is not None and writer.room() < 4:
            # The disk is behind: admit nothing we could not write (the joiner
            # repeats), and verify nothing we would not admit.
            stack.counts["keep_busy"] += 1
            return
        request = hs.parse_join(data)
        if request is None:
            stack.counts["bad_join"] += 1
            return
        tag = _tag(data)
        verdict = stack.keep.admit(request.name, request.role, request.mode, request.verkey, request.pubkey, stack.policy, request.stamp, now)
        carried: list[Outgoing] = []
        for note in verdict.events:
            if note.startswith("key-changed "):
                stack.counts["key_changed"] += 1  # a bound name with another key: refused
            elif note.startswith("rename-refused "):
                stack.counts["rename_refused"] += 1  # an accepted key presenting another name: refused
            elif note.startswith("keep-full "):
                stack.counts["keep_full"] += 1  # no record may be evicted for it: refused
            elif note.startswith("rotated "):
                stack.counts["rotations"] += 1  # an operator moved the name to this key meanwhile
                carried = self.retire(verdict.evicted[-1])
            stack._event_note(note)
        for fp in verdict.evicted:
            stack._table.drop(fp)
        if verdict.successor is not None and verdict.status is not Status.ACCEPTED:
            # The old key of a rotated name joined first: its messages go to the new key.
            stack._table.add(verdict.successor, None).requeue(carried)
        if verdict.status is Status.ACCEPTED:
            kind = PacketKind.JOIN_ACCEPT
            assert verdict.record is not None
            # The JOIN's source address is not recorded: JOINs are signed but
            # replayable, so only an authenticated INITIATE (which the joiner
            # sends next) or session traffic may say where a remote is.
            remote = stack._table.add(verdict.record, None)
            remote.requeue(carried)  # the old key's unsent messages go to the name's new key
            if remote.session is None and remote.presence is not Presence.JOINED:
                stack._set_presence(remote, Presence.JOINED)
        elif verdict.status is Status.PENDING:
            kind = PacketKind.JOIN_PEND
        else:
            kind = PacketKind.JOIN_REFUSE
            stack.counts["join_refused"] += 1
            stack._event_note(f"join refused from {address!r}: {verdict.reason}")
        uid = verdict.record.uid if verdict.record is not None else 0
        local = stack.local
        reply = hs.build_join_reply(kind, stack.keys, local.name, local.role, local.mode, request.nonce, verdict.reason, uid, tag)
        if self._unproven == address and not self._may_answer(address, len(reply), now, rated=False):
            return  # the joiner repeats; under load it is asked for a cookie instead
        ticket = stack.keep.unwritten(verdict.record.fingerprint) if writer is not None and verdict.record is not None else 0
        if ticket:
            # Told only once its record is on disk (see release), a
            # repeated JOIN as much as the first: tickets only grow, so the
            # queue is in ticket order.
            held = self.unwritten
            held.append((max(ticket, held[-1][0]) if held else ticket, reply, address, now + stack.allow_timeout))
            return
        stack._emit(reply, address)

    def retire(self, fp: str) -> list[Outgoing]:
        """The name of ``fp`` was rotated to another key: end its session, hand back what it had not delivered."""
        stack = self.stack
        remote = stack.remotes.get(fp)
        if remote is None:
            return []
        carried: list[Outgoing] = []
        for session in (remote.session, remote.allowing.session if remote.allowing is not None else None):
            if session is not None:
                stack._sessions.pop(session.local_index, None)
        if remote.session is not None:
            carried = remote.session.link.take_unfinished()
            release(remote.session.link)  # what it held for delivery leaves the budget with it
            remote.session = None
        carried += remote.backlog
        remote.backlog = []
        remote.backlog_bytes = 0
        remote.record.status = Status.REJECTED  # the object some caller may hold no longer names anyone
        return carried

    def loaded(self) -> bool:
        """Is this stack short of handshake tokens or of keep writes?  Then every JOIN gets a cookie."""
        writer = self.stack.keep.writer
        return self.stack._rate.low or len(self.unwritten) > 64 or (writer is not None and writer.pending > writer.limit // 8)

    def ask_cookie(self, data: bytes, address: Address, now: float) -> None:
        """Answer a JOIN with its address cookie: no parsing, no key work, no state."""
        stack = self.stack
        if len(data) < hs.MIN_JOIN:
            stack.counts["bad_join"] += 1  # never answer more bytes than came
            return
        if not self._may_answer(address, HEADER_SIZE + COOKIE_LEN, now):
            return  # over the reply budget: no MAC, no datagram (the joiner repeats)
        stack.counts["join_cookies"] += 1
        stack._emit(build_join_cookie(_tag(data), self.gate.cookie(address, now)), address)

    def on_cookied_join(self, data: bytes, address: Address, now: float) -> None:
        stack = self.stack
        unwrapped = unwrap_join(data)
        if unwrapped is None or not self.gate.valid(address, unwrapped[0], now):
            stack.counts["bad_join_cookie"] += 1
            return
        join = unwrapped[1]
        if join[0] != MAGIC or join[1] != PacketKind.JOIN:
            stack.counts["bad_join"] += 1
        elif self.affordable(address, now):
            stack._on_join(join, address, now)

    def affordable(self, address: Address, now: float) -> bool:
        """The join budget (fair per source, capped in all) and then the key-work buckets."""
        if not self.budget.take(address, now):
            self.stack.counts["join_limited"] += 1  # the joiner repeats; its address gets its share
            return False
        return self.stack._rate.afford(now, address)

    # -- replies held until their records are durable ----------------------------------

    def release(self) -> None:
        """Send the join replies whose keep records are durable now."""
        stack = self.stack
        writer = stack.keep.writer
        held = self.unwritten
        durable = writer.durable if writer is not None else 1 << 62
        now = stack.clock.now()
        while held and (held[0][0] <= durable or held[0][3] <= now):
            ticket, reply, address, _ = held.popleft()
            if ticket <= durable:
                stack._emit(reply, address)
            else:
                stack.counts["keep_unwritten"] += 1  # never said, never durable: the joiner repeats

    def start(self) -> None:
        """Hear the keep writer: it writes a byte, the scheduler's selector sees it and this stack wakes."""
        stack = self.stack
        if stack.keep.writer is not None and stack.scheduler is not None and self._wake is None:
            receive, send = socket.socketpair()
            receive.setblocking(False)
            send.setblocking(False)
            self._wake = (receive, send)
            stack.scheduler.add_reader(receive, self._on_durable)
            stack.keep.writer.listen(self._durable_elsewhere)

    def close(self) -> None:
        stack = self.stack
        if self._wake is None:
            return
        if stack.keep.writer is not None:
            stack.keep.writer.unlisten(self._durable_elsewhere)
        try:
            stack.scheduler.remove_reader(self._wake[0])
        except (KeyError, ValueError):
            pass
        for end in self._wake:
            end.close()
        self._wake = None

    def _durable_elsewhere(self) -> None:
        """On the writer's thread: wake this stack through its socket pair."""
        wake = self._wake
        if wake is not None:
            try:
                wake[1].send(b"\0")
            except OSError:
                pass  # full (a wake is pending already) or closed

    def _on_durable(self) -> None:
        wake = self._wake
        if wake is not None:
            try:
                while wake[0].recv(4096):
                    pass
            except OSError:
                pass
        self.stack._wake()
