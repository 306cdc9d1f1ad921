"""Allows: the CurveCP-style handshake that makes a session with an accepted remote.

RAET's *allow* transaction, both sides.  The initiator sends HELLO (its
short-term key, boxed to the responder's long-term key), gets a COOKIE
(the responder's short-term key and a cookie only the responder can open),
and sends INITIATE (the cookie and a vouch of its long-term key); the
responder answers with a sealed packet led by ALLOW_ACK.  The responder
keeps no state until a valid INITIATE: HELLO is answered statelessly, and
the cookie jar only remembers which short-term keys were used (replays).
Both ends then hold a :class:`~flowcast.transport.session.Session`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowcast.runtime.clock import wall_now
from flowcast.transport import handshake as hs
from flowcast.transport.budget import release
from flowcast.transport.crypto import derive_session_keys, fingerprint
from flowcast.transport.keep import Status
from flowcast.transport.port import Address
from flowcast.transport.presence import Presence
from flowcast.transport.reliable import Outgoing
from flowcast.transport.revoke import may_allow
from flowcast.transport.roadremote import Allowing, Remote, random32
from flowcast.transport.sender import ELICITING
from flowcast.transport.session import Session
from flowcast.transport.wire import ALLOW_ACK, PING, ChunkKind

if TYPE_CHECKING:
    from flowcast.transport.road import RoadStack

__all__ = ["Allows"]

_ALLOW_ACK_KIND = ChunkKind.ALLOW_ACK
_PING = PING.pack(ChunkKind.PING, 0)


class Allows:
    """The allows of one road: those it initiated (by tag), and the responder's cookie jar."""


    def __init__(self, stack: RoadStack) -> None:
        self.stack = stack
        self.pending: dict[int, Remote] = {}  # allows this stack initiated, by tag
        self.jar = hs.CookieJar()

    def new_index(self) -> int:
        """A session id no live session of this stack has."""
        sessions = self.stack._sessions
        while True:
            index = random32()
            if index not in sessions:
                return index

    def abandon(self, remote: Remote, keep: Session | None = None) -> None:
        """``remote``'s allow under way ends; its half-made session goes (unless it is ``keep``)."""
        attempt = remote.allowing
        if attempt is None:
            return
        self.pending.pop(attempt.tag, None)
        session = attempt.session
        if session is not None and session is not keep:
            self.stack._sessions.pop(session.local_index, None)
            release(session.link)
        remote.allowing = None

    # -- initiator ---------------------------------------------------------------

    def start(self, remote: Remote, now: float) -> None:
        """Begin (or begin again) an allow with ``remote``: its HELLO is due now."""
        if remote.address is None:
            return
        stack = self.stack
        if remote.allowing is not None:
            self.pending.pop(remote.allowing.tag, None)
            if remote.allowing.session is not None:
                stack._sessions.pop(remote.allowing.session.local_index, None)
        attempt = Allowing(random32(), now, now + stack.allow_timeout)
        attempt.packet = hs.build_hello(attempt.short, remote.record.pubkey, attempt.tag)
        remote.allowing = attempt
        self.pending[attempt.tag] = remote
        stack._dirty[remote] = None
        stack._urgent = True  # its HELLO is due now

    def on_cookie(self, data: bytes, address: Address, now: float) -> None:
        stack = self.stack
        tag = int.from_bytes(data[4:8], "big")
        remote = self.pending.get(tag)
        if remote is None or remote.allowing is None or remote.allowing.stage != "hello":
            stack.counts["stray_cookie"] += 1
            return
        attempt = remote.allowing
        opened = hs.open_cookie(data, attempt.short, remote.record.pubkey)
        if opened is None:
            stack.counts["bad_cookie"] += 1
            return
        server_short, cookie, responder_aegis = opened
        index = self.new_index()
        attempt.packet = hs.build_initiate(attempt.short, stack.keys, remote.record.pubkey, server_short, cookie, tag, index, stack.aegis)
        aegis = stack.aegis and responder_aegis
        shared = hs.session_shared(attempt.short.secret, server_short)
        forward, backward = derive_session_keys(shared, attempt.short.public, server_short, aegis)
        attempt.session = Session(
            index,
            None,
            forward,
            backward,
            stack._new_link(remote),
            initiator=True,
            client_short=attempt.short.public,
            created=now,
            scratch=stack._scratch,
            aegis=aegis,
        )
        attempt.short.secret = b""  # forward secrecy: the short-term secret is done
        stack._sessions[index] = (remote, attempt.session)  # can open the responder's packets
        attempt.stage = "initiate"
        attempt.next_send = now
        attempt.interval = 0.1
        stack._dirty[remote] = None

    def failed(self, remote: Remote, now: float) -> None:
        """``remote``'s allow ran past its deadline: try again after ``allow_timeout``."""
        stack = self.stack
        self.abandon(remote)
        remote.next_allow = now + stack.allow_timeout
        stack._event_note(f"allow with {remote.name} timed out")
        stack._due.expire_backlog(remote, now, "no session (allow timed out)")

    # -- both sides ----------------------------------------------------------------

    def established(self, remote: Remote, session: Session, now: float) -> None:
        """``session`` replaces whatever ``remote`` had; queued messages move in."""
        stack = self.stack
        old = remote.session
        carried: list[Outgoing] = []
        if old is not None and old is not session:
            stack._sessions.pop(old.local_index, None)
            carried = old.link.take_unfinished()
            release(old.link)  # what it held for delivery leaves the budget with it
        self.abandon(remote, keep=session)
        remote.session = session
        remote.last_heard = now
        stack._touch(remote)
        stack._urgent = True  # a new session's heartbeat may be due at once
        stack._sessions[session.local_index] = (remote, session)
        link = session.link
        link.completed = stack._done_call()
        if stack._events is not None:
            stack._watch_session(remote, session)
        watch = link.watch
        for msg in carried:
            link.submit(msg, now)
            if watch is not None:
                watch.sent(msg)  # under a new id: sequence numbers start again per session
        stack._due.take_backlog(remote, link, now)
        stack._set_presence(remote, Presence.ALLOWED)
        stack._event_note(f"allowed {remote.name} session {session.local_index:08x}")
        stack.keep.mark_allowed(remote.fingerprint, wall_now())

    # -- responder -------------------------------------------------------------------

    def on_hello(self, data: bytes, address: Address, now: float) -> None:
        stack = self.stack
        opened = hs.open_hello(data, stack.keys)
        if opened is None:
            stack.counts["bad_hello"] += 1
            return
        tag, client_short, shared = opened
        server_short = hs.ShortTerm()
        cookie = self.jar.make(now, client_short, server_short.secret)
        stack._emit(hs.build_cookie(shared, tag, server_short, cookie, stack.aegis), address)

    def on_initiate(self, data: bytes, address: Address, now: float) -> None:
        stack = self.stack
        initiate = hs.open_initiate(data, now, self.jar)
        if initiate is None:
            stack.counts["bad_initiate"] += 1
            return
        # The record is named by both keys: a JOIN that presented someone
        # else's X25519 key made a record no vouch can ever open.
        # Authenticate (the vouch), then authorize (the keep).
        shared = stack._long_shared.get(initiate.client_long) or stack.keys.shared(initiate.client_long)
        if not hs.check_vouch(initiate, shared):
            stack.counts["bad_vouch"] += 1
            return
        remote = stack.remotes.get(fingerprint(initiate.client_verkey, initiate.client_long))
        if remote is None or remote.record.status is not Status.ACCEPTED:
            stack.counts["not_accepted"] += 1
            return
        stack._long_shared[initiate.client_long] = shared  # cached only for accepted remotes
        current = remote.session
        if self.jar.seen(initiate.client_short):
            if current is not None and not current.initiator and current.client_short == initiate.client_short:
                # The initiator did not hear our ALLOW_ACK yet: say it again,
                # to where this copy came from, without moving the session
                # (an observer racing a copy must not redirect it; the
                # initiator's first sealed packet settles the address).
                stack.counts["initiate_repeat"] += 1
                if not current.confirmed and current.remote_index is not None:
                    body = ALLOW_ACK.pack(_ALLOW_ACK_KIND, 0, current.local_index) + _PING
                    counter, datagram = current.seal(body)
                    current.link.sent(counter, len(body), ELICITING, now)
                    stack._dirty[remote] = None
                    stack._emit(datagram, address)
            else:
                stack.counts["replayed"] += 1
            return
        if current is not None and initiate.minted < current.created:
            # Begun before the session we now have (a delayed or crossed
            # allow): taking it would tear down a good session.
            stack.counts["stale_initiate"] += 1
            return
        if remote.allowing is not None and stack._pubkey < remote.record.pubkey:
            # Simultaneous allow: the smaller long-term key's initiation wins.
            stack.counts["allow_collision"] += 1
            return
        if not may_allow(stack, remote, now):
            return  # an operator rejected, rotated away or forgot the key since it was loaded
        self.jar.remember(now, initiate.client_short)
        server_public = hs.public_of(initiate.server_short_secret)
        session_key = hs.session_shared(initiate.server_short_secret, initiate.client_short)
        aegis = stack.aegis and initiate.aegis
        forward, backward = derive_session_keys(session_key, initiate.client_short, server_public, aegis)
        session = Session(
            self.new_index(),
            initiate.index,
            backward,
            forward,
            stack._new_link(remote),
            initiator=False,
            client_short=initiate.client_short,
            created=now,
            scratch=stack._scratch,
            aegis=aegis,
        )
        remote.address = address  # authenticated by the vouch
        self.established(remote, session, now)
        session.link.ack_owed = True  # carries the ALLOW_ACK out now
        stack._flushq[remote] = None
