"""What a micro-thread yields to block: the :class:`Wait` directives, and the :class:`Event` they wait on.

Apart from the scheduler (scheduler.py) because they are its interface to
the threads, not its loop: each directive's ``park`` only asks the
scheduler for a timer, a reader or a wake-up, so a new kind of wait is
written here without touching the run loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the scheduler imports these; they only name it
    from flowcast.runtime.scheduler import MicroThread, Scheduler

__all__ = ["Event", "Wait", "readable", "sleep", "sleep_until"]


class Wait:
    """Base of the directives a micro-thread yields to block.

    ``park`` is called once with the scheduler and the yielding thread; it
    must arrange for ``scheduler.wake(thread, value)`` to be called later.
    """

    __slots__ = ()

    def park(self, scheduler: "Scheduler", thread: "MicroThread") -> None:
        raise NotImplementedError


class _Sleep(Wait):
    __slots__ = ("delay",)

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def park(self, scheduler: "Scheduler", thread: MicroThread) -> None:
        thread._unpark = scheduler.call_at(scheduler.clock.now() + self.delay, scheduler.wake, thread).cancel


class _SleepUntil(Wait):
    __slots__ = ("when",)

    def __init__(self, when: float) -> None:
        self.when = when

    def park(self, scheduler: "Scheduler", thread: MicroThread) -> None:
        thread._unpark = scheduler.call_at(self.when, scheduler.wake, thread).cancel


class _Readable(Wait):
    __slots__ = ("fileobj",)

    def __init__(self, fileobj: Any) -> None:
        self.fileobj = fileobj

    def park(self, scheduler: "Scheduler", thread: MicroThread) -> None:
        fileobj = self.fileobj
        if scheduler.has_reader(fileobj):
            raise RuntimeError(f"{fileobj!r} already has a reader: readable() would replace it")

        def ready() -> None:
            scheduler.remove_reader(fileobj)
            scheduler.wake(thread)

        scheduler.add_reader(fileobj, ready)
        thread._unpark = lambda: scheduler.remove_reader(fileobj)


class _Join(Wait):
    __slots__ = ("target",)

    def __init__(self, target: MicroThread) -> None:
        self.target = target

    def park(self, scheduler: "Scheduler", thread: MicroThread) -> None:
        if self.target.done:
            scheduler.wake(thread, self.target.result)
        else:
            self.target._joiners.append(thread)


def sleep(delay: float) -> Wait:
    """Directive: resume after ``delay`` seconds of the scheduler's clock."""
    return _Sleep(delay)


def sleep_until(when: float) -> Wait:
    """Directive: resume when the scheduler's clock reaches ``when``."""
    return _SleepUntil(when)


def readable(fileobj: Any) -> Wait:
    """Directive: resume once ``fileobj`` (a socket or fd) is readable.

    One-shot: it registers and unregisters with the selector each time.  A
    stack that reads continuously should use :meth:`Scheduler.add_reader`
    with a persistent callback instead.
    """
    return _Readable(fileobj)


class Event:
    """A flag micro-threads can wait on; ``set`` wakes every waiter.

    Used where a wake-up comes from inside the process -- a simulated
    network delivering a datagram, a queue share getting a message.
    """

    __slots__ = ("_flag", "_waiters")

    def __init__(self) -> None:
        self._flag = False
        self._waiters: list[tuple[Scheduler, MicroThread]] = []

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        waiters, self._waiters = self._waiters, []
        for scheduler, thread in waiters:
            scheduler.wake(thread)

    def clear(self) -> None:
        self._flag = False

    def wait(self) -> Wait:
        """Directive: resume when the flag is set (at once if it is)."""
        return _EventWait(self)


class _EventWait(Wait):
    __slots__ = ("event",)

    def __init__(self, event: Event) -> None:
        self.event = event

    def park(self, scheduler: "Scheduler", thread: MicroThread) -> None:
        if self.event._flag:
            scheduler.wake(thread)
        else:
            entry = (scheduler, thread)
            waiters = self.event._waiters
            waiters.append(entry)
            thread._unpark = lambda: waiters.remove(entry) if entry in waiters else None
