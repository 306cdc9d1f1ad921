"""What Road and Lane stacks share: message API, inbox, and how they run.

A stack runs two ways with the same code:

* as a **micro-thread** of a :class:`~flowcast.runtime.Scheduler` (pass
  ``scheduler=``): the port's readability and one armed timer wake it; it
  never polls, and sends made by other micro-threads in one round go out
  together in the next, batched;
* from **plain Python** (no scheduler): call :meth:`Stack.service` to do
  everything that is ready now, or :func:`serve` to block in the OS until a
  condition holds -- what tests and benchmarks use.
"""

from __future__ import annotations

import json
import select
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import msgpack

from flowcast.errors import ClosedError
from flowcast.runtime.clock import RealClock
from flowcast.runtime.scheduler import Event
from flowcast.transport.linkevents import LinkEvents, EventSink
from flowcast.transport.hooks import Hooks, Replaced
from flowcast.transport.port import DatagramPort
from flowcast.transport.recording import MessageRecorder
from flowcast.transport.outgoing import Outgoing
from flowcast.transport.wire import F_JSON, F_RAW, F_UNRELIABLE, unpack_untrusted

__all__ = ["Stack", "Message", "EventSink", "LinkEvents", "serve", "F_RAW", "DEFAULT_TIMEOUT", "INBOX_ENTRY"]

DEFAULT_TIMEOUT = 60.0
RECEIVE_BATCH = 256
#: What a delivered message costs in the inbox beside its payload (its tuple and deque slot), counted
#: in ``inbox_bytes`` and so against the receive window: counted as nothing, empty messages -- 2
#: bytes each on the wire in a RUN chunk -- would never close it, and the inbox would grow unbounded.
INBOX_ENTRY = 64
#: A service this long after the last one that read data reads one datagram
#: only (see ``Stack.service``); sooner, reads drain in batches.
SPARSE_GAP = 0.0001

_packb = msgpack.Packer(use_bin_type=True).pack


class Message(NamedTuple):
    """A delivered message: who sent it, on which stream, what, and whether it came reliably
    (False: fire-and-forget, so its sender learns nothing of its fate)."""

    remote: str
    stream: int
    data: Any
    reliable: bool = True


class Stack:
    """Base of RoadStack and LaneStack; not used directly.

    ``hooks`` (flowcast.transport.hooks) is where others listen: ``message``
    (a delivered :class:`Message`; while any listener is installed messages
    go to the listeners, not the inbox), ``done`` (an :class:`Outgoing`
    finished: delivered, sent or failed), ``submitted`` (``(outgoing, to)``
    accepted by ``send``); a RoadStack adds ``presence`` and ``note``.
    """

    HOOKS: tuple[str, ...] = ("message", "done", "submitted")
    on_message = Replaced("message")
    on_done = Replaced("done")

    def __init__(self, port: DatagramPort, *, scheduler: Any = None, clock: Any = None, name: str = "stack") -> None:
        self.port = port
        self.name = name
        self.scheduler = scheduler
        self.clock = scheduler.clock if scheduler is not None else (clock or RealClock())
        # Set for a RealClock: the small send path reads the time without a Python call (roadsend.py).
        self._origin: float | None = self.clock.origin if type(self.clock) is RealClock else None
        self.inbox: deque[tuple[str, int, int, bytes]] = deque()
        self.inbox_bytes = 0
        self.counts: Counter[str] = Counter()
        self.hooks = Hooks(self.HOOKS, name, changed=self._hook_changed)
        self.default_timeout: float | None = DEFAULT_TIMEOUT
        self._outq: deque[tuple[bytes, Any, list | None]] = deque()
        self._closed = False
        self._event: Event | None = None
        self._thread: Any = None
        self._timer: Any = None
        self._timer_when: float | None = None
        self._writable_armed = False
        # Ports whose empty read is a system call (sockets) say so; a
        # simulated port's queue costs nothing to look at.
        self._sparse_reads = bool(getattr(port, "empty_read_costs", False))
        self._last_read = -1.0
        self._events: EventSink | None = None
        self._born: dict[Outgoing, list] = {}  # while recording: Outgoing -> [first send, msg id, src, dst]
        self._recorder: MessageRecorder | None = None

    # -- message events ----------------------------------------------------

    @property
    def event_sink(self) -> EventSink | None:
        """The sink message events go to, or None (the default: nothing recorded).

        (Not ``events``: a RoadStack's ``events`` is its list of text notes.)
        """
        return self._events

    def set_events(self, sink: EventSink | None) -> None:
        """Record message events into ``sink`` from now on (None: stop).

        Recording is a listener on this stack's hooks (and a watch on each
        link) while a sink is set; without one nothing is installed, so a
        stack that records nothing pays nothing per message.
        """
        if self._recorder is not None:
            self._recorder.detach()
            self._recorder = None
        self._events = sink
        self._born.clear()
        if sink is not None:
            self._recorder = MessageRecorder(self, sink)
        self._watch_links()

    def _link_watch(self, to: str) -> LinkEvents | None:
        """The watch of the link a message to ``to`` just entered."""
        return None

    def _watch_links(self) -> None:
        """Set (or clear, without a sink) the watch of every live link."""

    def _route_of(self, msg: Outgoing) -> tuple[tuple, tuple]:
        """``(src, dst)`` of a message no link has named (see LinkEvents)."""
        return ("", "", self.name, msg.stream), ("", "", str(msg.remote), msg.stream)

    def _done_call(self) -> Callable[[Outgoing], None] | None:
        """What a link calls for each message it finishes: nothing while nobody listens on ``done``.

        A road finishes hundreds of thousands of messages a second, and a call per
        message that only finds no listener was ~3% of a 100-byte message's cost.
        """
        return self._completed if self.hooks.done is not None else None

    def _hook_changed(self, name: str) -> None:
        if name == "done":
            call = self._done_call()
            for link in self._links():
                link.completed = call

    def _links(self) -> Iterable[Any]:
        """Every link of this stack that sends (each holds ``_done_call()`` as ``completed``)."""
        return ()

    def _completed(self, msg: Outgoing) -> None:
        done = self.hooks.done
        if done is not None:
            try:
                done(msg)
            except Exception:  # noqa: BLE001 - a listener's bug: logged and removed (hooks.py)
                self.hooks.failed("done", done)

    # -- the message API ---------------------------------------------------

    def send(
        self,
        data: Any,
        to: str,
        *,
        stream: int = 0,
        timeout: float | None | type(...) = ...,
        retries: int | None = None,
        burst: int = 0,
        reliable: bool = True,
        codec: str = "msgpack",
    ) -> Outgoing:
        """Queue ``data`` (a dict, or anything msgpack/JSON encodes) for ``to``.

        ``stream`` (0-65535) orders messages: in order within a stream, no order
        between streams.  ``timeout`` (seconds, None for none) and ``retries``
        (resends of any one segment) bound a reliable message; ``burst``
        caps its segments in flight; ``reliable=False`` is fire-and-forget.
        The returned :class:`Outgoing` shows the message's fate.  Once the
        stack is closed this raises :class:`~flowcast.errors.ClosedError`.
        """
        if codec == "msgpack":
            payload, flags = _packb(data), 0
        elif codec == "json":
            payload, flags = json.dumps(data, separators=(",", ":")).encode(), F_JSON
        else:
            raise ValueError(f"unknown codec {codec!r} (msgpack or json)")
        return self.send_bytes(payload, to, stream=stream, timeout=timeout, retries=retries, burst=burst, reliable=reliable, _flags=flags)

    def send_bytes(
        self,
        payload: bytes,
        to: str,
        *,
        stream: int = 0,
        timeout: float | None | type(...) = ...,
        retries: int | None = None,
        burst: int = 0,
        reliable: bool = True,
        _flags: int = F_RAW,
    ) -> Outgoing:
        """Like :meth:`send` for bytes the receiver gets back as bytes."""
        if self._closed:
            # A message accepted now could never be sent nor fail: say so at once.
            raise ClosedError(f"{self.name} is closed: cannot send to {to!r}")
        if not 0 <= stream <= 0xFFFF:
            raise ValueError("stream must be 0..65535")
        msg = Outgoing(
            payload,
            stream,
            _flags if reliable else _flags | F_UNRELIABLE,
            self.default_timeout if timeout is ... else timeout,
            retries,
            burst,
            to,
        )
        self._submit(msg, to)
        submitted = self.hooks.submitted
        if submitted is not None:
            try:
                submitted(msg, to)
            except Exception:  # noqa: BLE001 - a listener's bug: logged and removed (hooks.py)
                self.hooks.failed("submitted", submitted)
        event = self._event
        if event is not None and not event._flag:
            event.set()
        return msg

    def receive(self) -> Message | None:
        """The oldest delivered message, or None."""
        inbox = self.inbox
        while inbox:
            remote, stream, flags, payload = inbox.popleft()
            self.inbox_bytes -= len(payload) + INBOX_ENTRY
            data = self._decode(flags, payload)
            if data is not _UNDECODABLE:
                self._consumed()
                return Message(remote, stream, data, not flags & F_UNRELIABLE)
        self._consumed()
        return None

    def receive_many(self, limit: int = 1 << 30) -> list[Message]:
        out = []
        inbox = self.inbox
        decode = self._decode
        taken = 0
        append = out.append
        popleft = inbox.popleft
        make = tuple.__new__
        count = max(0, min(limit, len(inbox)))  # a limit below 0 takes nothing (and frees nothing)
        for _ in range(count):
            remote, stream, flags, payload = popleft()
            taken += len(payload)
            if flags & F_RAW:
                append(make(Message, (remote, stream, payload, not flags & F_UNRELIABLE)))
                continue
            data = decode(flags, payload)
            if data is not _UNDECODABLE:
                append(make(Message, (remote, stream, data, not flags & F_UNRELIABLE)))
        self.inbox_bytes -= taken + count * INBOX_ENTRY
        self._consumed()
        return out

    def _decode(self, flags: int, payload: bytes) -> Any:
        try:
            if flags & F_RAW:
                return payload
            if flags & F_JSON:
                return json.loads(payload)
            return unpack_untrusted(payload)  # a peer's bytes: wire.py says why not unpackb
        except Exception:  # noqa: BLE001 - a peer's bad payload must not raise here
            self.counts["undecodable"] += 1
            return _UNDECODABLE

    def _deliver_to_inbox(self, remote: str, stream: int, flags: int, payload: bytes) -> None:
        listeners = self.hooks.message
        if listeners is not None:
            data = self._decode(flags, payload)
            if data is _UNDECODABLE:
                return
            try:
                listeners(Message(remote, stream, data, not flags & F_UNRELIABLE))
                return
            except Exception:  # noqa: BLE001 - a listener's bug: logged and removed (hooks.py)
                self.hooks.failed("message", listeners)
                self.counts["listener_failed"] += 1
            # Its only listener failed on it: the message waits in the inbox like
            # every later one, rather than being acknowledged and lost.
        self.inbox.append((remote, stream, flags, payload))
        self.inbox_bytes += len(payload) + INBOX_ENTRY

    # -- for subclasses --------------------------------------------------------

    def _submit(self, msg: Outgoing, to: str) -> None:
        raise NotImplementedError

    def _consumed(self) -> None:
        """The application took messages: the receive window may reopen."""

    def _receive_batch(self, batch: list[tuple[bytes, Any]], now: float) -> None:
        """Read a batch of datagrams, one by one (a road has a quicker way: roadreceive.py)."""
        receive = self._receive
        for data, address in batch:
            try:
                receive(data, address, now)
            except Exception:  # noqa: BLE001 - a datagram must never take the stack down
                self.counts["internal_errors"] += 1

    def _receive(self, data: bytes, address: Any, now: float) -> None:
        raise NotImplementedError

    def _timers(self, now: float) -> None:
        raise NotImplementedError

    def _flush(self, now: float) -> None:
        raise NotImplementedError

    def next_deadline(self) -> float | None:
        raise NotImplementedError

    def _maybe_due(self, now: float) -> bool:
        """Whether a timer may be due at ``now`` (never False when one is).

        Subclasses may answer cheaply, without settling deadlines that can
        only have moved later than ``now``.
        """
        deadline = self.next_deadline()
        return deadline is not None and deadline <= now

    # -- output queue: a datagram stays queued until the port takes it ------------

    def _emit(self, datagram: bytes, address: Any, carried: list | None = None) -> bool:
        """Send now, or keep it queued (in order) until the port is writable.

        ``carried`` lists lane messages in the datagram: they become "sent"
        only when the port has really taken it.
        """
        if self._outq:
            self._outq.append((datagram, address, carried))
            return False
        if self.port.send(datagram, address):
            if carried:
                self._handed_over(carried)
            return True
        self._outq.append((datagram, address, carried))
        self._arm_writable()
        return False

    def _emit_batch(self, datagrams: list[bytes], address: Any) -> bool:
        """Send ``datagrams`` (one remote's, in order) in as few system calls as the port allows, or
        keep what it did not take queued, in order; False then (the caller stops sending for now).

        A run of equal-sized datagrams, the last of it no larger, goes to the
        port's ``send_segments`` (UDP: GSO, one call for up to 64): a 64 KiB
        message in 1,232-byte datagrams is 54 ``sendto`` calls otherwise.
        """
        outq = self._outq
        if outq:
            outq.extend((d, address, None) for d in datagrams)
            return False
        send_segments = getattr(self.port, "send_segments", None)
        send = self.port.send
        i, n = 0, len(datagrams)
        while i < n:
            first = datagrams[i]
            size = len(first)
            j = i + 1
            while j < n and len(datagrams[j]) == size:
                j += 1
            if j < n and len(datagrams[j]) < size:
                j += 1  # a shorter last datagram ends the run
            run = j - i
            if run == 1 or send_segments is None:
                taken = 1 if send(first, address) else 0
            else:
                taken = send_segments(b"".join(datagrams[i:j]), size, address)
            i += taken
            if taken < run:  # the port is full: the rest waits, in order, for it to be writable
                outq.extend((d, address, None) for d in datagrams[i:])
                self._arm_writable()
                return False
        return True

    def _drain_outq(self) -> bool:
        outq = self._outq
        send = self.port.send
        while outq:
            datagram, address, carried = outq[0]
            if not send(datagram, address):
                self._arm_writable()
                return False
            outq.popleft()
            if carried:
                self._handed_over(carried)
        return True

    def _handed_over(self, carried: list) -> None:
        """Lane messages whose datagram the kernel now holds."""

    @property
    def queued_datagrams(self) -> int:
        """Datagrams waiting for the port to take them."""
        return len(self._outq)

    def _arm_writable(self) -> None:
        if self.scheduler is not None and not self._writable_armed:
            self._writable_armed = True
            self.port.on_writable(self._on_writable)

    def _on_writable(self) -> None:
        self._writable_armed = False
        if self._event is not None:
            self._event.set()

    # -- running -------------------------------------------------------------

    def service(self) -> None:
        """Do all that is ready now: read, run due timers, send."""
        if self._closed:
            return
        now = self.clock.now()
        receive_batch = self._receive_batch
        receive_many = self.port.receive_many
        limit = RECEIVE_BATCH
        if self._sparse_reads:
            # Datagrams arriving one at a time (a request, its reply): read
            # just the one.  Draining until the socket says "nothing more"
            # costs a system call per wake that finds nothing -- on the
            # latency path of every round trip.  Readiness is level-triggered
            # (port.py), so anything left waiting wakes us again at once,
            # and the read after that, so soon, drains in batches.
            if now - self._last_read > SPARSE_GAP:
                limit = 1
        got = False
        for _ in range(64):  # bounded: other work must get its turn
            batch = receive_many(limit)
            if not batch:
                break
            got = True
            receive_batch(batch, now)
            if len(batch) < limit or limit == 1:
                break
            self._flush(now)  # acks for what we read so far
        now = self.clock.now()
        if got:
            self._last_read = now
            # What reading produced (acks, answers sent from a message listener) goes
            # before the timer check: it is on someone's round trip.
            self._flush(now)
        if got:
            # On the round trip (the application is about to take what was
            # read): only look for due timers if one may be due -- working
            # out every moved deadline waits for the next next_deadline().
            if self._maybe_due(now):
                self._timers(now)
                self._flush(now)
            return
        deadline = self.next_deadline()
        if deadline is not None and deadline <= now:
            self._timers(now)
        self._flush(now)  # what callers queued since the last flush, and what timers made

    def flush(self) -> None:
        """Send what is queued now, without reading or running timers.

        For plain-Python callers right after ``send``: the cheapest way to
        get a message out (a micro-thread stack flushes by itself).
        """
        if not self._closed:
            self._flush(self.clock.now())

    def start(self) -> None:
        """Run as a micro-thread of ``self.scheduler`` (done by the constructor)."""
        if self.scheduler is None or self._thread is not None:
            return
        self._event = Event()
        self.port.on_readable(self._event.set)
        self._thread = self.scheduler.spawn(self._run(), name=f"stack:{self.name}")

    def _run(self):  # type: ignore[no-untyped-def]
        event = self._event
        assert event is not None
        while not self._closed:
            self.service()
            self._arm_timer()
            yield event.wait()
            event.clear()

    def _arm_timer(self) -> None:
        when = self.next_deadline()
        if when is not None:
            floor = self.clock.now() + 1e-4
            if when < floor:
                # Everything due was just run; a deadline still in the past
                # would spin.  Never busy-loop: look again a moment later.
                self.counts["timer_floor"] += 1
                when = floor
        if when == self._timer_when:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_when = when
        if when is not None:
            self._timer = self.scheduler.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_when = None
        if self._event is not None:
            self._event.set()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self.scheduler is not None:
            try:
                self.port.on_readable(None)
                self.port.on_writable(None)
            except Exception:  # noqa: BLE001 - closing must not fail on a closed port
                pass
            if self._thread is not None and self._event is not None:
                self._event.set()
        self.port.close()

    @property
    def closed(self) -> bool:
        return self._closed


_UNDECODABLE = object()


def serve(stacks: Iterable[Stack], until: Callable[[], bool] | None = None, timeout: float = 10.0) -> bool:
    """Plain-Python loop: service ``stacks``, blocking in ``select`` between.

    Returns True once ``until()`` holds, False when ``timeout`` seconds pass
    first (with ``until=None`` it runs the whole ``timeout``).
    """
    stacks = list(stacks)
    end = time.monotonic() + timeout
    while True:
        for stack in stacks:
            stack.service()
        if until is not None and until():
            return True
        left = end - time.monotonic()
        if left <= 0:
            return False
        wait = left
        readers = []
        writers = []
        for stack in stacks:
            if stack.closed:
                continue
            readers.append(stack.port.fileno())  # type: ignore[attr-defined]
            if stack._outq:
                writers.append(stack.port.writable_fileno())  # type: ignore[attr-defined]
            deadline = stack.next_deadline()
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - stack.clock.now()))
        if not readers:
            return False
        select.select(readers, writers, [], wait)
