"""A cooperative scheduler of generator micro-threads, one per house.

A micro-thread is a generator.  What it yields tells the scheduler what it
waits for:

* ``None`` -- nothing; run me again in the next round (a cooperative yield);
* a :class:`Wait` -- a directive such as :func:`sleep`, :func:`sleep_until`,
  :func:`readable`, :meth:`Event.wait` or :meth:`MicroThread.join`
  (waits.py; re-exported here).

The hot path (a thread that yields ``None``) is a deque pop, a generator
send and a deque append, so a switch costs little more than a bare
generator round-robin.  Timers sit in a heap; sockets in a
:mod:`selectors` selector.  When nothing is runnable the scheduler blocks in
the selector until the next timer or datagram -- it never polls on a period,
so an idle house costs no CPU and a datagram wakes it at once.  With a
:class:`~flowcast.runtime.clock.VirtualClock` it instead jumps the clock to
the next timer, which makes whole runs instant and repeatable.
"""

from __future__ import annotations

import heapq
import itertools
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

from flowcast.errors import Error
from flowcast.runtime.callback import CallbackError
from flowcast.runtime.clock import Clock, RealClock
from flowcast.runtime.spin import Spin
from flowcast.runtime.waits import Event, Wait, _Join, readable, sleep, sleep_until

__all__ = [
    "CallbackError",
    "Event",
    "MicroThread",
    "MicroThreadError",
    "Scheduler",
    "Timer",
    "Wait",
    "readable",
    "sleep",
    "sleep_until",
]

Body = Generator[Any, Any, Any]


class MicroThreadError(RuntimeError, Error):
    """A micro-thread raised; the original exception is the ``__cause__``."""

    def __init__(self, thread: "MicroThread", error: BaseException) -> None:
        super().__init__(f"micro-thread {thread.name!r} failed: {error!r}")
        self.thread = thread
        self.error = error


class MicroThread:
    """One generator and its bookkeeping; made by :meth:`Scheduler.spawn`."""

    __slots__ = ("name", "gen", "step", "done", "result", "error", "_joiners", "_value", "_unpark")

    def __init__(self, gen: Body, name: str) -> None:
        self.name = name
        self.gen = gen
        self.step = gen.send
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self._joiners: list[MicroThread] = []
        self._value: Any = None
        self._unpark: Callable[[], None] | None = None  # undoes the current wait, for cancel()

    def join(self) -> "Wait":
        """Directive: wait until this thread ends; the yield returns its result."""
        return _Join(self)

    def __repr__(self) -> str:
        state = "done" if self.done else "live"
        return f"<MicroThread {self.name!r} {state}>"


class Timer:
    """A callback due at a clock time; :meth:`cancel` disarms it.

    A cancelled timer stays in the heap until it comes due or the heap is
    compacted; ``_scheduler`` (set while it is in a heap) lets ``cancel``
    count it there, so the scheduler knows when the dead outweigh the live.
    """

    __slots__ = ("when", "callback", "args", "cancelled", "_scheduler")

    def __init__(
        self, when: float, callback: Callable[..., Any], args: tuple, scheduler: "Scheduler | None" = None
    ) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False
        self._scheduler = scheduler

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            scheduler = self._scheduler
            if scheduler is not None:
                scheduler._timer_cancelled()


class Scheduler:
    """Runs micro-threads, timers and socket callbacks on one clock.

    ``run`` returns when nothing is left to do (no runnable thread, no timer,
    no reader), when ``until`` is reached, or after :meth:`stop`.  An
    exception escaping a micro-thread stops the run and is raised from it as
    :class:`MicroThreadError`, unless the thread was spawned with
    ``on_error``: a house must fail loudly, not lose a behaviour silently.
    A timer, reader or writer callback raising an :class:`Exception` ends
    the run the same way, as :class:`CallbackError` naming the callback (and
    its fd); a later ``run`` carries on with the work left.  KeyboardInterrupt
    and SystemExit pass unwrapped: the process is stopping, no callback failed.
    """

    #: A cancel sweeps every cancelled timer out in one pass once more than
    #: this many are over half the heap (asyncio's rule, ``_run_once``): a
    #: deadline armed and cancelled per message must not grow it unbounded.
    COMPACT_MIN = 100

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else RealClock()
        self._ready: deque[MicroThread] = deque()
        self._timers: list[tuple[float, int, Timer]] = []
        self._cancelled_timers = 0  # cancelled timers still in the heap
        self._seq = itertools.count()
        self._selector = selectors.DefaultSelector()
        #: Polls briefly before blocking while traffic is dense (spin.py); ``spin.budget = 0`` turns it off.
        self.spin = Spin()
        self._readers = 0  # registered reader and writer callbacks: work that may come
        self._stopping = False
        self._failure: MicroThreadError | None = None
        self._error_handlers: dict[MicroThread, Callable[[MicroThread, BaseException], None]] = {}
        self._threads: dict[MicroThread, None] = {}  # in spawn order: close() ends them in it
        self._waker: tuple[socket.socket, socket.socket] | None = None
        self.switches = 0  # micro-thread steps run
        self.waits = 0  # times the loop looked for timers and I/O

    # -- micro-threads -------------------------------------------------

    def spawn(
        self,
        body: Body,
        *,
        name: str | None = None,
        on_error: Callable[[MicroThread, BaseException], None] | None = None,
    ) -> MicroThread:
        """Start ``body`` (a generator) in the next round."""
        if not hasattr(body, "send"):
            raise TypeError(f"spawn() needs a generator, got {type(body).__name__}")
        thread = MicroThread(body, name or getattr(body, "__name__", "thread"))
        self._threads[thread] = None
        if on_error is not None:
            self._error_handlers[thread] = on_error
        self._ready.append(thread)
        return thread

    def wake(self, thread: MicroThread, value: Any = None) -> None:
        """Make a parked thread runnable; ``value`` is what its yield returns."""
        if not thread.done:
            thread._value = value
            thread._unpark = None
            self._ready.append(thread)

    def cancel(self, thread: MicroThread) -> None:
        """End a thread now, running its ``finally`` blocks."""
        if thread.done:
            return
        unpark, thread._unpark = thread._unpark, None
        if unpark is not None:  # its timer, reader or event wait must not outlive it
            unpark()
        try:
            thread.gen.close()
        except BaseException as error:  # noqa: BLE001 - reported like any failure
            self._finish(thread, None, error)
        else:
            self._finish(thread, None, None)
        try:
            self._ready.remove(thread)
        except ValueError:
            pass

    @property
    def threads(self) -> frozenset[MicroThread]:
        return frozenset(self._threads)

    # -- timers and readers ---------------------------------------------

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any) -> Timer:
        timer = Timer(when, callback, args, self)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        return self.call_at(self.clock.now() + delay, callback, *args)

    def add_reader(self, fileobj: Any, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` each time ``fileobj`` is readable, until removed."""
        self._watch(fileobj, 0, callback)

    def remove_reader(self, fileobj: Any) -> None:
        self._watch(fileobj, 0, None)

    def has_reader(self, fileobj: Any) -> bool:
        try:
            return self._selector.get_key(fileobj).data[0] is not None
        except (KeyError, ValueError):
            return False

    def add_writer(self, fileobj: Any, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` each time ``fileobj`` is writable, until removed.

        Writability is level-triggered: remove the writer once the backlog
        that needed it is sent, or it fires on every pass.
        """
        self._watch(fileobj, 1, callback)

    def remove_writer(self, fileobj: Any) -> None:
        self._watch(fileobj, 1, None)

    def _watch(self, fileobj: Any, slot: int, callback: Callable[[], Any] | None) -> None:
        """Set the reader (slot 0) or writer (slot 1) of ``fileobj``; None clears it."""
        selector = self._selector
        try:
            key = selector.get_key(fileobj)
        except RuntimeError:  # the scheduler is closed: nothing is watched any more
            if callback is None:
                return
            raise
        except (KeyError, ValueError):  # unknown, or already closed (fileno -1)
            if callback is None:
                return
            key = None
        pair = list(key.data) if key is not None else [None, None]
        had = pair[slot] is not None
        pair[slot] = callback
        events = (selectors.EVENT_READ if pair[0] else 0) | (selectors.EVENT_WRITE if pair[1] else 0)
        if key is None:
            if events:
                selector.register(fileobj, events, pair)
        elif events:
            selector.modify(fileobj, events, pair)
        else:
            selector.unregister(fileobj)
        self._readers += (callback is not None) - had

    def _dispatch(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        for key, mask in events:
            reader, writer = key.data
            if mask & selectors.EVENT_READ and reader is not None:
                try:
                    reader()
                except Exception as error:  # noqa: BLE001 - reported naming the callback
                    raise CallbackError("reader", reader, error, key.fd) from error
            if mask & selectors.EVENT_WRITE and writer is not None:
                # The reader may have removed this writer: look again.
                try:
                    writer = self._selector.get_key(key.fileobj).data[1]
                except KeyError:
                    writer = None
                if writer is not None:
                    try:
                        writer()
                    except Exception as error:  # noqa: BLE001 - reported naming the callback
                        raise CallbackError("writer", writer, error, key.fd) from error

    # -- running ---------------------------------------------------------

    def stop(self) -> None:
        """Ask ``run`` to return after the current round; safe in a signal handler."""
        self._stopping = True
        if self._waker is not None:
            try:
                self._waker[1].send(b"\0")
            except OSError:
                pass

    def enable_wakeup(self) -> None:
        """Let :meth:`stop` interrupt a blocking wait (needed for signal handlers)."""
        if self._waker is None:
            receive, send = socket.socketpair()
            receive.setblocking(False)
            send.setblocking(False)
            self._waker = (receive, send)
            self._selector.register(receive, selectors.EVENT_READ, (self._drain_waker, None))

    def _drain_waker(self) -> None:
        assert self._waker is not None
        try:
            while self._waker[0].recv(4096):
                pass
        except BlockingIOError:
            pass

    #: Switches run back to back before timers and sockets are looked at.
    #: Looking costs a clock read and maybe an epoll (0.5-1 us); a switch
    #: costs ~0.1 us, so looking after every round would dominate a house
    #: with few busy threads.  256 switches delay a due timer or a datagram
    #: by some tens of microseconds at most -- never a scheduler period.
    BATCH = 256

    def run(self, until: float | None = None) -> None:
        """Run until idle, until clock time ``until``, or until stopped.

        A :meth:`stop` that came before this call (a signal between
        installing handlers and running) is honoured, not forgotten: the
        flag is cleared when a run ends, not when one begins.
        """
        try:
            self._run(until)
        finally:
            self._stopping = False

    def _run(self, until: float | None) -> None:
        ready = self._ready
        popleft = ready.popleft
        append = ready.append
        batch = self.BATCH
        while not self._stopping:
            switched = 0
            for _ in range(batch):
                if not ready:
                    break
                switched += 1
                thread = popleft()
                value = thread._value
                if value is not None:
                    thread._value = None
                try:
                    directive = thread.step(value)
                except StopIteration as stop:
                    self._finish(thread, stop.value, None)
                    continue
                except BaseException as error:  # noqa: BLE001 - routed to handler or run()
                    self._finish(thread, None, error)
                    if self._failure is not None:
                        break
                    continue
                if directive is None:
                    append(thread)
                else:
                    park = getattr(directive, "park", None)
                    try:
                        if park is None:
                            raise TypeError(f"micro-thread {thread.name!r} yielded {directive!r}, not a Wait")
                        park(self, thread)
                    except Exception as error:  # noqa: BLE001 - the thread's failure, reported as such
                        thread.gen.close()
                        self._finish(thread, None, error)
                        if self._failure is not None:
                            break
            self.switches += switched
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure from failure.error
            if self._stopping:  # asked from inside a thread: do not block first
                return
            if not self._advance(until, bool(ready)):
                return

    def _advance(self, until: float | None, busy: bool) -> bool:
        """Fire due timers and ready sockets; block if idle.  False means: return."""
        clock = self.clock
        timers = self._timers
        self.waits += 1
        now = clock.now()
        if until is not None and now >= until:
            # Everything due at ``until`` still runs, then the run ends.
            return not busy and self._fire_due(now) and bool(self._ready)
        while timers and timers[0][2].cancelled:  # a cancelled timer is no work
            heapq.heappop(timers)[2]._scheduler = None
            self._cancelled_timers -= 1
        deadline = timers[0][0] if timers else None
        if not busy and deadline is None and not self._readers:
            return False  # nothing left that could ever run (the waker alone is no work)
        waiting = self._readers > 0 or self._waker is not None
        if until is not None and (deadline is None or deadline > until):
            deadline = until
        if clock.virtual:
            if waiting:
                # Real sockets under simulated time: look, but never let the
                # wall clock pass while a timer could run instead.
                block = not busy and deadline is None
                self._dispatch(self._selector.select(None if block else 0))
            if not busy and deadline is not None and not self._ready:
                clock.advance_to(deadline)  # type: ignore[attr-defined]
        else:
            timeout = 0.0 if busy else (None if deadline is None else max(0.0, deadline - now))
            if waiting:
                self._dispatch(self.spin.wait(self._selector.select, timeout))
            elif timeout:
                time.sleep(timeout)
        self._fire_due(clock.now())
        return True

    def _fire_due(self, now: float) -> bool:
        timers = self._timers
        fired = False
        while timers and timers[0][0] <= now:
            timer = heapq.heappop(timers)[2]
            timer._scheduler = None  # out of the heap: a late cancel() is not counted
            if timer.cancelled:
                self._cancelled_timers -= 1
                continue
            fired = True
            try:
                timer.callback(*timer.args)
            except Exception as error:  # noqa: BLE001 - reported naming the callback
                raise CallbackError("timer", timer.callback, error) from error
        return fired

    def _timer_cancelled(self) -> None:
        cancelled = self._cancelled_timers = self._cancelled_timers + 1
        if cancelled > self.COMPACT_MIN and cancelled * 2 > len(self._timers):
            self._compact_timers()

    def _compact_timers(self) -> None:
        """Drop cancelled timers; rebuilt in place (the run loop holds the list),
        and (when, seq) keys are kept, so ties still fire in the order armed."""
        timers = self._timers
        live = []
        for entry in timers:
            if entry[2].cancelled:
                entry[2]._scheduler = None
            else:
                live.append(entry)
        heapq.heapify(live)
        timers[:] = live
        self._cancelled_timers = 0

    def _finish(self, thread: MicroThread, result: Any, error: BaseException | None) -> None:
        thread.done = True
        thread.result = result
        thread.error = error
        self._threads.pop(thread, None)
        handler = self._error_handlers.pop(thread, None)
        for joiner in thread._joiners:
            self.wake(joiner, result)
        thread._joiners.clear()
        if error is not None:
            if handler is not None:
                handler(thread, error)
            elif self._failure is None and not isinstance(error, GeneratorExit):
                self._failure = MicroThreadError(thread, error)

    def close(self) -> None:
        """End every live thread (their ``finally`` blocks run) and free the selector."""
        for thread in list(self._threads):
            self.cancel(thread)
        self._failure = None
        self._ready.clear()
        for entry in self._timers:
            entry[2]._scheduler = None
        self._timers.clear()
        self._cancelled_timers = 0
        if self._waker is not None:
            for sock in self._waker:
                sock.close()
            self._waker = None
        self._selector.close()
