"""Process supervisor: run an estate's houses, one OS process each, and keep them up.

A launcher hands the supervisor a list of :class:`ChildSpec` (what to exec, where
its output goes) and calls :meth:`Supervisor.run`. The supervisor knows nothing of
flows; it only keeps processes alive:

* A child that exits for any reason other than our own stop is restarted after an
  exponential back-off (``backoff_initial``, doubling, capped at ``backoff_max``),
  so a house that crashes on start does not spin a core. The back-off resets once
  a child has stayed up ``healthy_after`` seconds: an occasional crash of a house
  that ran for hours restarts it at once, not after the longest delay.
* A child that exits with an error says why: the supervisor reads the reason
  the child left (its ``last_words`` file, else the last line of its log since
  this start, see ``childproc.exit_reason``) and prints it with the exit code,
  so a console shows ``flows/x.flo:5:5: error: ...`` or ``road main: port
  4000 on 0.0.0.0 is taken`` rather than only ``exited with code 2``; the
  status file keeps it as ``last_error``.
* A child that keeps failing is held, not restarted forever (systemd's
  ``StartLimitBurst``/``StartLimitIntervalSec``): ``start_limit_burst`` exits
  within ``start_limit_interval`` seconds, with no healthy run between them,
  and it stays down ("held") with one clear message naming its last error.
  A child that exits with a code of its spec's ``hold_on`` is held at once:
  it said it refused to start for a reason no restart can fix (a house's
  ``EXIT_HOLD``, 3: a damaged store file, which it names), and five more
  starts would only say so five more times.
  Restarting cannot fix a flow error, a taken port or a behaviour that raises
  at start; it only fills the log.  The defaults, 5 in 30 s: a house takes
  0.5-1 s to start and fail, and the back-off puts 0.25+0.5+1+2 s between
  five starts, so five failed starts take some 5-9 s -- over systemd's own
  10 s on a loaded machine starting one house per core, well inside 30 s.
  And a house that crashes only after running ``healthy_after`` (10 s) is
  never held (its count restarts with each healthy run): it is mostly up,
  and restarting it is what it needs.  When every child is held nothing is
  left to supervise: run() stops and returns ``EXIT_ALL_HELD``, so
  ``flowcast run`` exits non-zero instead of idling with no house.
* Children never outlive the supervisor. Each child runs in its own process group
  (a terminal ^C reaches the supervisor only, which then stops the houses in
  order), and on Linux each child asks the kernel for ``SIGTERM`` when the
  supervisor dies (``PR_SET_PDEATHSIG``), so even ``kill -9`` of the supervisor
  leaves no orphan houses holding ports and keeps.
* Stopping (``stop()``, ``SIGINT``, ``SIGTERM``) sends ``SIGTERM`` to the children
  stage by stage (``ChildSpec.stop_stage``, lowest first; an estate stops its
  workers before the manor they send through), waits up to ``stop_timeout``
  plus the stage's longest ``drain`` for each stage, ``SIGKILL``\\s what is left
  and reaps all.
* Idle means idle: the loop blocks in a selector on one pidfd per child plus a
  wake-up pipe; the only timeout is the nearest back-off or health timer.
* With ``status_path`` the current state is written as JSON on every change, by
  atomic replace, so a separate ``flowcast status`` process reads a whole file::

      {"supervisor_pid": 123, "updated": 1763778990.5, "state": "running",
       "houses": [{"name": "manor", "pid": 124, "state": "running", "restarts": 0,
                   "started_at": 1763778980.1, "last_exit": null, "next_start": null,
                   "last_error": null}]}

How a child is started so that it never outlives the supervisor (the
PR_SET_PDEATHSIG shim) is childproc.py's job; this module is the policy:
when to start, restart, back off and stop.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from flowcast.house.childproc import (
    FALLBACK_POLL,
    HAVE_PIDFD,
    ChildSpec,
    ChildState,
    ChildStatus,
    _Child,
    describe_exit,
    exit_reason,
    pid_of,
    signal_child,
    spawn,
)
from flowcast.house.runlock import AlreadyRunning, take_run_lock
from flowcast.house.supervisorfile import read_status
from flowcast.runtime.clock import wall_now
from flowcast.runtime.durable import atomic_write

__all__ = [
    "ChildSpec", "ChildState", "ChildStatus", "Supervisor", "read_status", "EXIT_ALL_HELD",
    "AlreadyRunning", "take_run_lock",
]

log = logging.getLogger("flowcast.supervisor")

#: run()'s result when it stopped because every child was held (none left running).
EXIT_ALL_HELD = 3

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Supervisor:
    """Start children, restart them when they exit, stop them all on request.

    ``run()`` does all the work in the calling thread; ``stop()`` and ``status()``
    may be called from any thread, and ``stop()`` also from a signal handler.
    A Supervisor runs once.
    """

    def __init__(
        self,
        children: Sequence[ChildSpec],
        *,
        status_path: Path | None = None,
        backoff_initial: float = 0.25,
        backoff_max: float = 30.0,
        healthy_after: float = 10.0,
        stop_timeout: float = 5.0,
        start_limit_burst: int = 5,
        start_limit_interval: float = 30.0,
        handle_signals: bool = True,
    ) -> None:
        names = [c.name for c in children]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate child names: {duplicates}")
        if not 0 < backoff_initial <= backoff_max:
            raise ValueError("need 0 < backoff_initial <= backoff_max")
        if healthy_after < 0 or stop_timeout < 0:
            raise ValueError("healthy_after and stop_timeout must be >= 0")
        if start_limit_burst < 0 or not start_limit_interval > 0:
            raise ValueError("need start_limit_burst >= 0 (0: never hold) and start_limit_interval > 0")
        self._children = [_Child(spec, backoff_initial) for spec in children]
        self._status_path = status_path
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._healthy_after = healthy_after
        self._stop_timeout = stop_timeout
        self._start_limit_burst = start_limit_burst
        self._start_limit_interval = start_limit_interval
        self._all_held = False  # set by the run() thread only
        self._handle_signals = handle_signals
        self._lock = threading.Lock()
        self._phase: Literal["new", "running", "stopping", "stopped"] = "new"
        # stop() must be safe in a signal handler, so it takes no lock: it bumps a
        # counter and writes a byte to a non-blocking pipe the loop selects on. The
        # pipe lives as long as the Supervisor so a late stop() never writes to a
        # closed (or reused) descriptor.
        self._stop_requests = 0
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)

    # ------------------------------------------------------------------ public

    def run(self) -> int:
        """Start every child and supervise until stopped; then stop them all.

        Returns 0 when every child ended on SIGTERM within ``stop_timeout``,
        1 when some had to be SIGKILLed, ``EXIT_ALL_HELD`` (3) when it stopped
        by itself because every child was held (see the start limit). With ``handle_signals`` (the default)
        SIGINT and SIGTERM call :meth:`stop` while run() is active; that needs the
        main thread. A second stop request while stopping kills at once.
        """
        with self._lock:
            if self._phase != "new":
                raise RuntimeError("a Supervisor runs only once")
            self._phase = "running"
        if self._status_path is not None:
            self._status_path.parent.mkdir(parents=True, exist_ok=True)
        previous = self._install_signals() if self._handle_signals else {}
        try:
            try:
                self._supervise()
            finally:
                # Also on an unexpected exception: never leave children behind.
                clean = self._shutdown()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)
            self._selector.close()
        if self._all_held:
            return EXIT_ALL_HELD
        return 0 if clean else 1

    def stop(self) -> None:
        """Ask run() to stop all children and return. Lock-free; idempotent."""
        self._stop_requests += 1
        try:
            os.write(self._wake_w, b"\0")
        except OSError:  # pipe full (a wake-up is pending anyway) or closed
            pass

    def status(self) -> list[ChildStatus]:
        """Snapshot of every child, in the order given to the constructor."""
        with self._lock:
            return self._snapshot(time.monotonic(), wall_now())

    # ----------------------------------------------------------------- running

    def _supervise(self) -> None:
        for child in self._children:
            if self._stop_requests:
                return
            self._start(child)
        self._write_status()
        while not self._stop_requests and not self._all_held:
            timeout = self._next_timer(time.monotonic())
            if not HAVE_PIDFD:
                timeout = FALLBACK_POLL if timeout is None else min(timeout, FALLBACK_POLL)
            for key, _ in self._selector.select(timeout):
                if key.data is None:
                    self._drain_wake()
                else:
                    self._reap(key.data)
            if not HAVE_PIDFD:
                for child in self._children:
                    if child.proc is not None and child.proc.poll() is not None:
                        self._reap(child)
            self._run_timers(time.monotonic())

    def _next_timer(self, now: float) -> float | None:
        """Seconds to the nearest back-off end or health mark; None if no timer."""
        deadlines: list[float] = []
        for child in self._children:
            if child.state == "backoff" and child.next_start_mono is not None:
                deadlines.append(child.next_start_mono)
            elif child.state == "starting" and child.started_mono is not None:
                deadlines.append(child.started_mono + self._healthy_after)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - now)

    def _run_timers(self, now: float) -> None:
        changed = False
        for child in self._children:
            if self._stop_requests:
                break
            if (
                child.state == "starting"
                and child.started_mono is not None
                and now - child.started_mono >= self._healthy_after
            ):
                with self._lock:
                    child.state = "running"  # the back-off resets in _schedule_restart
                log.debug("%s healthy (pid %s)", child.spec.name, pid_of(child))
                changed = True
            elif (
                child.state == "backoff"
                and child.next_start_mono is not None
                and now >= child.next_start_mono
            ):
                self._start(child)
                changed = True
        if changed:
            self._write_status()

    def _start(self, child: _Child) -> None:
        spec = child.spec
        try:
            proc, wall_started = spawn(spec)
        except OSError as exc:
            log.error("%s could not be started: %s", spec.name, exc)
            now = time.monotonic()
            with self._lock:
                if child.starts:
                    child.restarts += 1
                child.starts += 1
                child.proc = None
                child.last_exit = None
                child.last_error = f"could not be started: {exc}"
                child.started_mono = None  # it did not run, let alone healthily
                held = self._failed_too_often(child, now)
                if held:
                    self._hold(child)
                else:
                    self._schedule_restart(child, now)
            if held:
                self._say_held(child)
                self._check_all_held()
            self._write_status()
            return
        try:
            pidfd = os.pidfd_open(proc.pid) if HAVE_PIDFD else None
        except OSError:  # e.g. a seccomp filter: do not leave an unwatched child behind
            proc.kill()
            proc.wait()
            raise
        with self._lock:
            if child.starts:
                child.restarts += 1
            child.starts += 1
            child.proc = proc
            child.pidfd = pidfd
            child.state = "starting"
            child.started_mono = time.monotonic()
            child.started_wall = wall_started
            child.next_start_mono = None
        if pidfd is not None:
            self._selector.register(pidfd, selectors.EVENT_READ, child)
        log.info(
            "%s started pid %d",
            spec.name,
            proc.pid,
            extra={"house": spec.name, "event": "started", "pid": proc.pid},
        )
        self._write_status()

    def _reap(self, child: _Child) -> None:
        """The child's pidfd is readable (or poll saw it exit): collect it, schedule restart."""
        proc = child.proc
        if proc is None:
            return
        code = proc.poll()
        if code is None:  # not actually exited; nothing to do
            return
        self._forget(child)
        now = time.monotonic()
        reason = exit_reason(child.spec) if code > 0 else None
        held = False
        with self._lock:
            child.last_exit = code
            if reason is not None:
                child.last_error = reason
            if self._phase == "running" and not self._stop_requests:
                if self._failed_too_often(child, now) or code in child.spec.hold_on:
                    self._hold(child)
                    held = True
                    delay = None
                else:
                    delay = self._schedule_restart(child, now)
            else:
                child.state = "stopped"
                delay = None
        log.log(
            logging.INFO if self._phase != "running" else logging.WARNING,
            "%s pid %d exited %s%s",
            child.spec.name,
            proc.pid,
            describe_exit(code),
            f": {_indent(reason)}" if reason else "",
            extra={"house": child.spec.name, "event": "exited", "pid": proc.pid, "code": code, "reason": reason},
        )
        if held:
            self._say_held(child)
            self._check_all_held()
        if delay is not None:
            log.info(
                "%s restarting in %.3gs",
                child.spec.name,
                delay,
                extra={"house": child.spec.name, "event": "backoff", "delay": delay},
            )
        self._write_status()

    def _failed_too_often(self, child: _Child, now: float) -> bool:
        """Under the lock: count this exit; True if it makes ``start_limit_burst`` in the interval.

        Exits are counted since the child last ran ``healthy_after``: a house
        that comes up and runs between its crashes is not in a start loop.
        """
        if self._start_limit_burst == 0:
            return False
        if child.started_mono is not None and now - child.started_mono >= self._healthy_after:
            child.failures.clear()
        child.failures = [t for t in child.failures if now - t < self._start_limit_interval]
        child.failures.append(now)
        return len(child.failures) >= self._start_limit_burst

    @staticmethod
    def _hold(child: _Child) -> None:
        """Under the lock: stop restarting ``child`` (the caller then says so, :meth:`_say_held`)."""
        child.state = "held"
        child.next_start_mono = None

    def _say_held(self, child: _Child) -> None:
        """Once per hold, after the exit it follows: held, why, and what would bring it back."""
        if child.last_exit in child.spec.hold_on:
            log.error(
                "%s held: it refused to start (exit %d: restarting cannot fix it); not restarting it until the supervisor"
                " is restarted%s",
                child.spec.name,
                child.last_exit,
                f"; last error: {_indent(child.last_error)}" if child.last_error else "",
                extra={"house": child.spec.name, "event": "held", "reason": child.last_error},
            )
            return
        log.error(
            "%s held: it failed %d times within %.3g s; not restarting it until the supervisor is restarted%s",
            child.spec.name,
            len(child.failures),
            self._start_limit_interval,
            f"; last error: {_indent(child.last_error)}" if child.last_error else "",
            extra={"house": child.spec.name, "event": "held", "reason": child.last_error},
        )

    def _check_all_held(self) -> None:
        """If every child is held, nothing is left to supervise: end run() (it returns EXIT_ALL_HELD)."""
        with self._lock:
            if not self._children or any(c.state != "held" for c in self._children):
                return
            self._all_held = True
        log.error(
            "nothing left running: %s held; the supervisor stops",
            ", ".join(c.spec.name for c in self._children),
            extra={"event": "all_held"},
        )

    def _schedule_restart(self, child: _Child, now: float) -> float:
        """Under the lock: put the child in back-off; return the delay chosen.

        The back-off resets here, from how long the child ran, rather than when the
        health timer fires, so it is right even if the loop was late to that timer.
        """
        if child.started_mono is not None and now - child.started_mono >= self._healthy_after:
            child.backoff = self._backoff_initial
        delay = child.backoff
        child.backoff = min(child.backoff * 2, self._backoff_max)
        child.state = "backoff"
        child.next_start_mono = now + delay
        return delay

    def _forget(self, child: _Child) -> None:
        if child.pidfd is not None:
            self._selector.unregister(child.pidfd)
            os.close(child.pidfd)
        with self._lock:
            child.pidfd = None
            child.proc = None

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    # ---------------------------------------------------------------- stopping

    def _shutdown(self) -> bool:
        """SIGTERM all, stage by stage (last started first within one), wait, SIGKILL leftovers, reap.
        True if no SIGKILL."""
        with self._lock:
            self._phase = "stopping"
            live = [c for c in reversed(self._children) if c.proc is not None]
            for child in self._children:
                child.next_start_mono = None
                if child.proc is not None:
                    child.state = "stopping"
                elif child.state != "held":  # held stays held: the status file says why it is down
                    child.state = "stopped"
        self._write_status()
        if live:
            log.info("stopping %d children", len(live))
        requests = self._stop_requests
        clean = True
        for stage in sorted({c.spec.stop_stage for c in live}):
            if not self._stop_stage([c for c in live if c.spec.stop_stage == stage], requests):
                clean = False
        for child in live:
            if child.proc is not None:
                child.proc.wait()  # SIGKILL cannot be ignored
                self._reap(child)
        with self._lock:
            self._phase = "stopped"
            for child in self._children:
                if child.state != "held":
                    child.state = "stopped"
        self._write_status()
        log.info("supervisor stopped")
        return clean

    def _stop_stage(self, stage: list[_Child], requests: int) -> bool:
        """SIGTERM one stage's children, wait for them, SIGKILL what is left; True if none needed it.

        Stages go one after the other (``ChildSpec.stop_stage``): the houses
        that send to others drain while those others still run.  A stage
        waits its longest ``drain`` plus ``stop_timeout``; a second stop
        request ends every wait at once (kill now).
        """
        for child in stage:
            if child.proc is not None:
                self._signal(child, signal.SIGTERM)
        patience = self._stop_timeout + max((c.spec.drain for c in stage), default=0.0)
        deadline = time.monotonic() + patience
        while any(c.proc is not None for c in stage):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._stop_requests > max(requests, 1):
                break  # out of patience, or asked twice: kill now
            if not HAVE_PIDFD:
                remaining = min(remaining, FALLBACK_POLL)
            for key, _ in self._selector.select(remaining):
                if key.data is None:
                    self._drain_wake()
                else:
                    self._reap(key.data)
            if not HAVE_PIDFD:
                for child in stage:
                    if child.proc is not None and child.proc.poll() is not None:
                        self._reap(child)
        clean = True
        for child in stage:
            if child.proc is None:
                continue
            clean = False
            log.warning(
                "%s pid %d did not stop in %.3gs; sending SIGKILL",
                child.spec.name,
                child.proc.pid,
                patience,
                extra={"house": child.spec.name, "event": "killed", "pid": child.proc.pid},
            )
            self._signal(child, signal.SIGKILL)
        return clean

    @staticmethod
    def _signal(child: _Child, signum: int) -> None:
        signal_child(child.proc, signum)

    # ------------------------------------------------------------------ status

    def _snapshot(self, now_mono: float, now_wall: float) -> list[ChildStatus]:
        out = []
        for child in self._children:
            next_start = None
            if child.next_start_mono is not None:
                next_start = now_wall + (child.next_start_mono - now_mono)
            out.append(
                ChildStatus(
                    name=child.spec.name,
                    pid=pid_of(child),
                    state=child.state,
                    restarts=child.restarts,
                    started_at=child.started_wall,
                    last_exit=child.last_exit,
                    next_start=next_start,
                    last_error=child.last_error,
                )
            )
        return out

    def _write_status(self) -> None:
        if self._status_path is None:
            return
        with self._lock:
            now_wall = wall_now()
            doc = {
                "supervisor_pid": os.getpid(),
                "updated": now_wall,
                "state": self._phase,
                "houses": [asdict(s) for s in self._snapshot(time.monotonic(), now_wall)],
            }
        try:
            atomic_write(self._status_path, (json.dumps(doc, indent=1) + "\n").encode())
        except OSError as exc:  # a full disk must not take the houses down
            log.error("cannot write status file %s: %s", self._status_path, exc)

    # ----------------------------------------------------------------- signals

    def _install_signals(self) -> dict[int, _Handler]:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "Supervisor.run() with handle_signals=True must run in the main thread"
            )

        def handler(signum: int, _stack: FrameType | None) -> None:
            self.stop()

        previous: dict[int, _Handler] = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, handler)
        return previous

    def __del__(self) -> None:
        for fd in (getattr(self, "_wake_r", None), getattr(self, "_wake_w", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


def _indent(text: str | None) -> str:
    """A reason of several lines (a flow's errors) as one log record: continuation lines indented."""
    return "\n    ".join((text or "").splitlines())
