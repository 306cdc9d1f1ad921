"""One child process of a supervisor: what to run, how to start it, how to signal it.

Split from supervisor.py, which decides when children start, restart, back
off and stop; this module knows how one is started so that it never
outlives the supervisor, and how it is signalled without hitting a reused
pid.

Why a tiny exec shim rather than ``preexec_fn`` for ``PR_SET_PDEATHSIG``: the
subprocess documentation warns that ``preexec_fn`` can deadlock in a process that
has threads (the child runs Python code between ``fork`` and ``exec`` while locks
may be held by threads that no longer exist there), and it forbids the fast
``vfork`` path. Instead a child is started as ``python -I -S -c SHIM <ppid> argv...``:
the shim calls ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` through ctypes in a fresh,
single-threaded interpreter, checks the supervisor is still its parent (it may
have died before the ``prctl``), and ``execvp``\\s the real command. The death
signal survives ``execve`` and the pid stays the same, so the supervisor still
watches, signals and reaps the real house. The cost is one bare interpreter start
(about 20 ms) per child start. The process group is set by ``Popen``'s own
``process_group=0`` (no Python code in the child).

Note that Linux sends the parent-death signal when the *thread* that forked the
child exits. All children are started from the thread that runs :meth:`run`, and
that thread stops and reaps them before it returns, so this only matters if that
thread is killed abnormally, and then it is what we want.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from flowcast.house.childpipe import PIPE_MAX as _PIPE_MAX
from flowcast.house.childpipe import Offer as _Offer
from flowcast.runtime.clock import wall_now

__all__ = [
    "ChildSpec", "ChildState", "ChildStatus", "spawn", "signal_child", "describe_exit", "exit_reason",
    "write_last_words", "HAVE_PIDFD", "FALLBACK_POLL", "LAST_WORDS_MAX", "EXIT_HOLD",
]

ChildState = Literal["starting", "running", "backoff", "held", "stopping", "stopped"]

#: A house that exits with this code says it refused to start for a reason no restart can fix
#: (a damaged file: flowcast.errors.DamagedFile); an estate's ChildSpecs list it in ``hold_on``.
EXIT_HOLD = 3
#: At most this much of a child's last words (or of its log's tail) is read back.
LAST_WORDS_MAX = 4096
#: The line spawn() writes into a child's log before each start; a reason is looked for after the last one.
START_MARK = b"--- flowcast supervisor: starting "

_PR_SET_PDEATHSIG = 1

# Run in the child before exec: argv is [python, -I, -S, -c, SHIM, ppid, cmd, args...].
_PDEATHSIG_SHIM = """\
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(%d, signal.SIGTERM, 0, 0, 0) != 0:
    sys.stderr.write("flowcast supervisor: prctl(PR_SET_PDEATHSIG) failed: %%s\\n"
                     %% os.strerror(ctypes.get_errno()))
if os.getppid() != int(sys.argv[1]):
    sys.stderr.write("flowcast supervisor: supervisor gone before start\\n")
    os._exit(1)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write("flowcast supervisor: cannot exec %%r: %%s\\n" %% (sys.argv[2], exc))
    os._exit(127)
""" % _PR_SET_PDEATHSIG

_USE_SHIM = sys.platform.startswith("linux")
HAVE_PIDFD = hasattr(os, "pidfd_open")
#: Without pidfds (not Linux) a supervisor cannot block on child exit; it checks this often.
FALLBACK_POLL = 0.2


@dataclass(frozen=True)
class ChildSpec:
    """One child to run: a house or yard process.

    ``log`` receives the child's stdout and stderr, appended, so one file per house
    keeps its whole history across restarts (each start adds a marker line).
    ``env`` None inherits the supervisor's environment; ``cwd`` None its directory.
    ``stdin`` (bytes) is written into a socket that is the child's stdin, the
    same bytes at every start, once the child has asked for them
    (childpipe.signal_ready, after it made itself non-dumpable): how an
    estate hands a house its plan and its lane keys without argv,
    environment or a file (handoff.py).  None gives the child ``/dev/null``.
    ``last_words`` is a file the child writes why it is exiting with an
    error into (:func:`write_last_words`; the child must be told its path,
    e.g. on its command line): the supervisor removes it before each start
    and reads it after an error exit, so its console and status say why a
    house failed instead of only its exit code (:func:`exit_reason`).
    ``hold_on``: exit codes with which the child says a restart cannot help
    (an estate's houses: ``EXIT_HOLD``, a damaged file); such an exit holds
    it at once instead of after the start limit.  Empty by default: to a
    program that is not a house, 3 is just another exit code.
    """

    name: str
    argv: Sequence[str]
    log: Path
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    stdin: bytes | None = field(default=None, repr=False)
    last_words: Path | None = None
    stop_stage: int = 0
    drain: float = 0.0
    hold_on: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("ChildSpec.name must not be empty")
        if not self.argv:
            raise ValueError(f"ChildSpec {self.name!r}: argv must not be empty")
        if self.stdin is not None and len(self.stdin) > _PIPE_MAX:
            raise ValueError(f"ChildSpec {self.name!r}: stdin is {len(self.stdin)} bytes, at most {_PIPE_MAX}")
        if not self.drain >= 0:
            raise ValueError(f"ChildSpec {self.name!r}: drain must be >= 0 seconds")


@dataclass(frozen=True)
class ChildStatus:
    """A snapshot of one child, as :meth:`Supervisor.status` and the status file give it.

    ``state``: "starting" (process up, not yet up for ``healthy_after``; a crash now
    lengthens the back-off), "running" (up at least ``healthy_after``), "backoff"
    (exited, waiting until ``next_start``), "held" (failed too often in a row:
    not restarted again, see ``Supervisor``'s start limit), "stopping" (sent
    SIGTERM by a stop), "stopped". Times are wall-clock seconds since the epoch so another process can
    show them. ``last_exit`` is the exit code, or minus the signal number that
    killed the child; None if it has not exited (or could not be started).
    ``restarts`` counts starts after the first.  ``last_error`` is why the
    child last exited with an error, as it said (:func:`exit_reason`); None
    if it has not, or did not say.
    """

    name: str
    pid: int | None
    state: ChildState
    restarts: int
    started_at: float | None
    last_exit: int | None
    next_start: float | None
    last_error: str | None = None


class _Child:
    """Mutable per-child bookkeeping; only the run() thread writes it (under the lock)."""

    def __init__(self, spec: ChildSpec, backoff: float) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.pidfd: int | None = None
        self.state: ChildState = "stopped"
        self.restarts = 0
        self.starts = 0
        self.started_mono: float | None = None
        self.started_wall: float | None = None
        self.last_exit: int | None = None
        self.next_start_mono: float | None = None
        self.backoff = backoff  # delay before the next restart
        self.last_error: str | None = None
        # monotonic times of the exits since the child last ran healthy (the start limit's window)
        self.failures: list[float] = []


def spawn(spec: ChildSpec) -> tuple[subprocess.Popen[bytes], float]:
    """Start ``spec``'s process (its log marked, its stdin offered); the process and its wall start time.

    Raises OSError when it cannot be started.
    """
    argv = [os.fspath(a) for a in spec.argv]
    if _USE_SHIM:
        argv = [sys.executable, "-I", "-S", "-c", _PDEATHSIG_SHIM, str(os.getpid()), *argv]
    env = dict(spec.env) if spec.env is not None else None
    wall_started = wall_now()
    if spec.last_words is not None:  # what an earlier start said must not be taken for this one's reason
        try:
            spec.last_words.unlink()
        except FileNotFoundError:
            pass
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    with open(spec.log, "ab") as out:
        out.write(
            START_MARK
            + f"{spec.name} at {time.strftime('%Y-%m-%dT%H:%M:%S%z', time.localtime(wall_started))} ---\n".encode()
        )
        out.flush()
        offer = _Offer(spec.stdin) if spec.stdin is not None else None
        try:
            proc = subprocess.Popen(
                argv,
                stdin=offer.child_fd() if offer is not None else subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=spec.cwd,
                close_fds=True,
                process_group=0,
            )
        except BaseException:
            if offer is not None:
                offer.abandon()
            raise
        if offer is not None:
            offer.started(spec.name)  # written when the child asks, on a thread of its own
    return proc, wall_started


def signal_child(proc: subprocess.Popen[bytes] | None, signum: int) -> None:
    """Signal a child's process group (the house and anything it spawned).

    Only while the child is unreaped, so its pid (= its group id) cannot have
    been reused by an unrelated process. A child that moved to another group
    is signalled alone; never both, since a second SIGTERM means "hurry" to
    some programs.
    """
    if proc is None or proc.returncode is not None:
        return
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
    except ProcessLookupError:  # exited meanwhile; the pidfd will tell
        pass


def pid_of(child: _Child) -> int | None:
    return child.proc.pid if child.proc is not None else None


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"on signal {signal.Signals(-code).name}"
        except ValueError:
            return f"on signal {-code}"
    return f"with code {code}"



def write_last_words(path: str | os.PathLike[str], text: str) -> None:
    """In a child about to exit with an error: leave ``text`` (why) for the supervisor.

    Written whole before the process exits, and read only after it has been
    reaped, so no atomic replace is needed.  Never raises: a child that
    cannot say why must still exit with its code.
    """
    data = text.encode("utf-8", "replace")[:LAST_WORDS_MAX]
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return
    try:
        os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)


def exit_reason(spec: ChildSpec) -> str | None:
    """Why ``spec``'s child just exited with an error, in its own words; None if it left none.

    Its last words file when it wrote one (a house names the located flow
    error, or the port it could not bind); otherwise the last line it wrote
    to its log since its start marker -- for a Python crash the exception
    line, for a failed exec the shim's message.  Bounded reads only: a log
    may be large, the reason is short.
    """
    if spec.last_words is not None:
        try:
            with open(spec.last_words, "rb") as handle:
                text = handle.read(LAST_WORDS_MAX).decode("utf-8", "replace").strip()
        except OSError:
            text = ""
        if text:
            return text
    try:
        with open(spec.log, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - 2 * LAST_WORDS_MAX))
            tail = handle.read(2 * LAST_WORDS_MAX)
    except OSError:
        return None
    mark = tail.rfind(START_MARK)
    if mark >= 0:
        tail = tail[mark:].partition(b"\n")[2]  # what this start wrote, not the marker
    for line in reversed(tail.decode("utf-8", "replace").splitlines()):
        if line.strip():
            return line.strip()[:LAST_WORDS_MAX]
    return None
