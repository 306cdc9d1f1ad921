"""A road's receiving: each datagram to its session, or to the handshakes.

Split from road.py; a mixin of :class:`~flowcast.transport.road.RoadStack`
(its state is the stack's).

Datagrams come in batches (a GRO read is tens of them), and in bulk
traffic nearly all of a batch are sealed datagrams of one session from one
address.  The first of a run goes the whole way (``_receive``, then
``_authentic``: address, presence, the ALLOW_ACK, the remote's books);
once that left the session settled at that address, the next ones of the
same session and address only open and hand their body to the link
(``piece_in`` first: a middle piece of a message, nearly every datagram
of bulk traffic, is taken in one call -- reassembly.py).  What
``_authentic`` would have done again for them is done already: the same
``now`` for the whole batch, the same address, the session confirmed and
its remote alive.  A body that starts with an ALLOW_ACK, another session
or another address goes the whole way again.  In process that took a
64 KiB message in 1,232-byte datagrams from ~283 to ~278 us to receive.
"""

from __future__ import annotations

from typing import Any

from flowcast.transport.admission import Allowance, RoadAdmission
from flowcast.transport.holding import _CannotHold
from flowcast.transport.port import Address
from flowcast.transport.presence import Presence
from flowcast.transport.roadremote import Remote
from flowcast.transport.session import Session
from flowcast.transport.wire import ALLOW_ACK, HEADER, HEADER_SIZE, MAGIC, ChunkKind, PacketKind, WireError

__all__ = ["RoadReceiving"]

_ALLOW_ACK_KIND = ChunkKind.ALLOW_ACK
_SEALED = PacketKind.SEALED
_unpack_header = HEADER.unpack_from
_ALIVE = Presence.ALIVE


class RoadReceiving:
    """``_receive_batch``, ``_receive`` and ``_authentic`` of a RoadStack."""

    __slots__ = ()
    counts: Any
    _sessions: dict[int, tuple[Remote, Session]]
    _flushq: dict[Remote, None]
    _dirty: dict[Remote, None]
    _allowance: Allowance | None
    max_message: int
    _admission: RoadAdmission

    def _receive_batch(self, batch: list[tuple[bytes, Address]], now: float) -> None:
        counts = self.counts
        sessions = self._sessions
        settled = None  # the (remote, session) entry the last datagram left settled at ``at``
        at = None
        quick: dict[Remote, None] = {}  # remotes read the quick way: queued again at the end (below)
        last = None
        for data, address in batch:
            try:
                if settled is not None and address == at and len(data) >= HEADER_SIZE and data[1] == _SEALED and data[0] == MAGIC:
                    _, _, _, index, counter = _unpack_header(data)
                    if sessions.get(index) is settled:  # still this stack's, and not replaced
                        remote, session = settled
                        window = session.window
                        if counter <= window.highest and not window.check(counter):
                            counts["replayed"] += 1
                            continue
                        body = session.open_fresh(data, counter)
                        if body is None:
                            counts["unauthentic"] += 1
                            continue
                        if body and body[0] != _ALLOW_ACK_KIND:
                            link = session.link
                            if link.piece_in(body, counter, now):
                                if remote is not last:
                                    quick[remote] = None
                                    last = remote
                                continue
                            self._source = (remote, address)
                            try:
                                link.handle(body, now)
                            except WireError as error:
                                if 0 <= remote.admits < self.max_message and type(error) is _CannotHold:
                                    self._admission.refused(remote, len(body))
                                else:
                                    counts["bad_chunks"] += 1
                                continue
                            finally:
                                self._source = None
                            link.received(counter)
                            if remote is not last:
                                quick[remote] = None
                                last = remote
                            continue
                        if not self._authentic(remote, session, body, counter, address, now):
                            settled = None
                        continue
                settled = self._receive(data, address, now)
                at = address
            except Exception:  # noqa: BLE001 - a datagram must never take the stack down
                counts["internal_errors"] += 1
                settled = None
        # What _authentic does per datagram, done once: the ACKs these datagrams owe go with the
        # flush that ends the batch, and their deadlines are looked at again -- even if a listener
        # flushed (or looked at deadlines) mid-batch, after the run's first datagram queued them.
        if quick:
            flushq = self._flushq
            dirty = self._dirty
            for remote in quick:
                flushq[remote] = None
                dirty[remote] = None

    def _receive(self, data: bytes, address: Address, now: float) -> tuple[Remote, Session] | None:
        """Read one datagram; the session entry when it was a sealed one of a settled session
        (see ``_receive_batch``), else None."""
        if len(data) < HEADER_SIZE or data[0] != MAGIC:
            self.counts["malformed"] += 1
            return
        kind = data[1]
        if kind == _SEALED:
            _, _, _, index, counter = _unpack_header(data)
            entry = self._sessions.get(index)
            if entry is None:
                self.counts["unknown_session"] += 1
                return None
            remote, session = entry
            window = session.window
            if counter <= window.highest and not window.check(counter):  # a new highest is never a replay: no call
                self.counts["replayed"] += 1
                return None
            body = session.open_fresh(data, counter)
            if body is None:
                self.counts["unauthentic"] += 1
                return None
            return entry if self._authentic(remote, session, body, counter, address, now) else None
        # Handshakes can make something due at once (see Deadlines.maybe_due).
        self._urgent = True
        if kind == PacketKind.HELLO:
            if self._rate.afford(now, address):
                self._on_hello(data, address, now)
        elif kind == PacketKind.INITIATE:
            if self._rate.afford(now, address):
                self._on_initiate(data, address, now)
        elif kind == PacketKind.COOKIE:
            self._on_cookie(data, address, now)
        elif kind == PacketKind.JOIN:
            self._joins.receive_join(data, address, now)
        elif kind == PacketKind.COOKIED_JOIN:
            self._joins.on_cookied_join(data, address, now)
        elif kind in (PacketKind.JOIN_ACCEPT, PacketKind.JOIN_PEND, PacketKind.JOIN_REFUSE):
            self._on_join_reply(data, address, now)
        elif kind == PacketKind.JOIN_COOKIE:
            self._joins.on_join_cookie(data, address, now)
        else:
            self.counts["malformed"] += 1

    def _authentic(self, remote: Remote, session: Session, body: bytes, counter: int, address: Address, now: float) -> bool:
        """Handle an opened body; whether the session is settled at ``address`` (the quick path's condition)."""
        allowance = self._allowance
        if allowance is not None and (remote.admits_version != allowance.version or now >= remote.admits_until):
            self._admission.refresh(remote, session, now)  # before the link holds anything of it
        remote.last_heard = now
        self._dirty[remote] = None
        self._flushq[remote] = None
        if remote._address != address:  # the property's slot: this runs per datagram
            if remote.address is None or (not session.confirmed and not session.initiator):
                # First authentic packet of a session we accepted: it comes
                # from the initiator itself (an INITIATE copy raced from
                # elsewhere may have set the address we answered).
                remote.address = address
            else:
                # Roaming, or an observer racing a copy from elsewhere: the
                # datagram is authentic but its source proves nothing.  Ask
                # that address to answer a challenge first (path validation).
                self._paths.challenge(remote, session, address, now)
        offset = 0
        if body and body[0] == _ALLOW_ACK_KIND and len(body) >= ALLOW_ACK.size:
            _, _, responder_index = ALLOW_ACK.unpack_from(body)
            offset = ALLOW_ACK.size
            if session.initiator and session.remote_index is None:
                session.remote_index = responder_index
                session.confirmed = True
                self._allows.established(remote, session, now)
            session.link.ack_owed = True
        if not session.confirmed and not session.initiator:
            session.confirmed = True  # the initiator has used the session
        if remote.presence is not _ALIVE and session.remote_index is not None:
            self._set_presence(remote, _ALIVE)
            if remote.backlog and remote.session is session:
                self._due.take_backlog(remote, session.link, now)
        link = session.link
        self._source = (remote, address)
        try:
            link.handle(body[offset:] if offset else body, now)
        except WireError as error:
            if 0 <= remote.admits < self.max_message and type(error) is _CannotHold:
                self._admission.refused(remote, len(body))  # its allowance held it to less (admission.py)
            else:
                self.counts["bad_chunks"] += 1
            return False
        finally:
            self._source = None
        link.received(counter)
        return remote._address == address and session.confirmed and remote.presence is _ALIVE
