"""Supervisor: start, restart with back-off, stop, no orphans, status file.

Children are tiny Python scripts written to tmp_path. Nothing sleeps to
synchronise: every wait polls a condition against a bounded deadline.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import flowcast
from flowcast.house.supervisor import ChildSpec, ChildStatus, Supervisor, read_status

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process semantics")

REPO = Path(flowcast.__file__).resolve().parent.parent

SLEEPER = """\
import os, sys, time
print("hello", sys.argv[1], os.getcwd(), os.environ.get("FLOWCAST_TEST"), flush=True)
time.sleep(60)
"""

IGNORER = """\
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""

# Counts its runs in a file: runs 0-3 crash at once, run 4 lives 0.8 s (longer
# than healthy_after) then crashes, run 5 crashes at once, run 6 stays up.
CRASHER = """\
import pathlib, sys, time
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
print("run", n, flush=True)
if n == 4:
    time.sleep(0.8)
if n >= 6:
    time.sleep(60)
sys.exit(3)
"""

# A supervisor in its own process, as a launcher would run it.
RUNNER = """\
import logging, sys
from pathlib import Path
from flowcast.house.supervisor import ChildSpec, Supervisor
logging.basicConfig(level=logging.INFO)
status, logdir, sleeper = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
children = [ChildSpec(name, [sys.executable, sleeper, name], logdir / f"{name}.log")
            for name in ("manor", "worker1")]
sys.exit(Supervisor(children, status_path=status, stop_timeout=2.0).run())
"""


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 5.0) -> Any:
    """Poll ``cond`` until truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        pause.wait(0.01)


def alive(pid: int) -> bool:
    """True if ``pid`` is a process that has not exited (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def spec(tmp_path: Path, name: str, code: Path, *args: str, **kw: Any) -> ChildSpec:
    return ChildSpec(name, [sys.executable, str(code), *args], tmp_path / "logs" / f"{name}.log", **kw)


def log_text(child: ChildSpec) -> str:
    try:
        return child.log.read_text()
    except FileNotFoundError:
        return ""


def by_name(sup: Supervisor) -> dict[str, ChildStatus]:
    return {s.name: s for s in sup.status()}


@contextmanager
def supervising(children: Sequence[ChildSpec], **kw: Any) -> Iterator[tuple[Supervisor, dict[str, Any]]]:
    """Run a Supervisor in a thread; always stop and join it."""
    kw.setdefault("backoff_initial", 0.05)
    kw.setdefault("backoff_max", 0.2)
    kw.setdefault("stop_timeout", 2.0)
    sup = Supervisor(children, handle_signals=False, **kw)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["rc"] = sup.run()
        except BaseException as exc:  # surfaced by the test
            result["error"] = exc

    thread = threading.Thread(target=target, name="supervisor")
    thread.start()
    try:
        yield sup, result
    finally:
        sup.stop()
        thread.join(10)
        assert not thread.is_alive(), "supervisor did not stop"
        assert "error" not in result, result.get("error")


def test_all_children_start_in_own_group_and_log_output(tmp_path: Path) -> None:
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    workdir = tmp_path / "work"
    workdir.mkdir()
    children = [
        spec(tmp_path, "manor", sleeper, "manor"),
        spec(tmp_path, "worker1", sleeper, "worker1", env={**os.environ, "FLOWCAST_TEST": "yes"}, cwd=workdir),
    ]
    with supervising(children) as (sup, _):
        for child in children:
            wait_for(lambda c=child: "hello" in log_text(c), f"{child.name} output")
        assert f"hello manor {os.getcwd()} None" in log_text(children[0])
        assert f"hello worker1 {workdir} yes" in log_text(children[1])
        assert "--- flowcast supervisor: starting worker1" in log_text(children[1])
        states = by_name(sup)
        for child in children:
            st = states[child.name]
            assert st.pid is not None and alive(st.pid)
            assert os.getpgid(st.pid) == st.pid  # own process group: ^C reaches the supervisor only
            assert st.state in ("starting", "running")
            assert st.restarts == 0 and st.last_exit is None and st.started_at is not None


def test_crashing_child_restarts_with_growing_backoff_that_resets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flowcast.supervisor")
    crasher = script(tmp_path, "crasher.py", CRASHER)
    child = spec(tmp_path, "flaky", crasher, str(tmp_path / "count"))
    with supervising([child], backoff_initial=0.05, backoff_max=0.2, healthy_after=0.6) as (sup, _):
        wait_for(lambda: "run 6" in log_text(child), "the seventh run", timeout=8)
        st = wait_for(lambda: by_name(sup)["flaky"] if by_name(sup)["flaky"].restarts == 6 else None, "restarts")
        assert st.last_exit == 3 and st.state in ("starting", "running") and st.pid is not None
    delays = [r.delay for r in caplog.records if getattr(r, "event", None) == "backoff"]
    # doubling, capped at 0.2; run 4 outlived healthy_after so the back-off restarted at 0.05
    assert delays == pytest.approx([0.05, 0.1, 0.2, 0.2, 0.05, 0.1])
    exits = [r.code for r in caplog.records if getattr(r, "event", None) == "exited"]
    assert exits[:6] == [3] * 6


def test_backoff_status_reports_next_start(tmp_path: Path) -> None:
    crasher = script(tmp_path, "crash.py", "import sys; sys.exit(5)\n")
    child = spec(tmp_path, "crash", crasher)
    sup = Supervisor([child], handle_signals=False, backoff_initial=5.0, backoff_max=10.0)
    calls = count_selects(sup)
    thread = threading.Thread(target=sup.run)
    thread.start()
    try:
        st = wait_for(lambda: by_name(sup)["crash"] if by_name(sup)["crash"].state == "backoff" else None, "back-off")
        assert st.pid is None and st.last_exit == 5 and st.restarts == 0
        assert st.next_start is not None
        assert 4.0 < st.next_start - time.time() <= 5.0  # waiting the initial 5 s, not restarted yet
        before = calls[0]
        threading.Event().wait(0.3)  # a measuring window, not synchronisation
        assert calls[0] - before <= 1  # one select until the back-off ends, no polling
    finally:
        sup.stop()
        thread.join(10)
    assert not thread.is_alive()


def test_kill9_running_child_is_restarted_once(tmp_path: Path) -> None:
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    children = [spec(tmp_path, "manor", sleeper, "manor"), spec(tmp_path, "worker1", sleeper, "worker1")]
    with supervising(children, healthy_after=30.0) as (sup, _):
        wait_for(lambda: "hello" in log_text(children[1]), "worker1 output")
        before = by_name(sup)
        old = before["worker1"].pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        st = wait_for(
            lambda: (s := by_name(sup)["worker1"]).pid not in (None, old) and s,
            "worker1 restarted",
        )
        assert st.restarts == 1
        assert st.last_exit == -signal.SIGKILL
        assert not alive(old)
        wait_for(lambda: log_text(children[1]).count("hello") == 2, "second worker1 output")
        manor = by_name(sup)["manor"]
        assert manor.pid == before["manor"].pid and manor.restarts == 0  # untouched


READER = """\
import hashlib, sys, time
from flowcast.house.childpipe import signal_ready
signal_ready(0)  # stdin bytes are written only once the child asks (a house asks once non-dumpable)
data = sys.stdin.buffer.read()
print("got", len(data), hashlib.sha256(data).hexdigest(), flush=True)
if sys.argv[1] == "crash":
    sys.exit(4)
time.sleep(60)
"""


def test_stdin_bytes_reach_every_start_of_a_child_whole(tmp_path: Path) -> None:
    reader = script(tmp_path, "reader.py", READER)
    small, large = b"plan and keys", os.urandom(300_000)  # large: more than a default pipe holds
    children = [
        spec(tmp_path, "steady", reader, "stay", stdin=small),
        spec(tmp_path, "flaky", reader, "crash", stdin=large),
        spec(tmp_path, "none", reader, "stay"),
    ]
    with supervising(children) as (sup, _):
        wait_for(lambda: log_text(children[1]).count("got") >= 3, "three starts of flaky")
        wait_for(lambda: "got" in log_text(children[0]) and "got" in log_text(children[2]), "the others")
        import hashlib

        assert f"got {len(small)} {hashlib.sha256(small).hexdigest()}" in log_text(children[0])
        flaky = [line for line in log_text(children[1]).splitlines() if line.startswith("got")]
        assert set(flaky) == {f"got {len(large)} {hashlib.sha256(large).hexdigest()}"}  # the same bytes each start
        assert "got 0 " in log_text(children[2])  # /dev/null
    assert "stdin=" not in repr(children[0]) and "plan and keys" not in repr(children[0])  # keys stay out of logs
    with pytest.raises(ValueError, match="at most"):
        ChildSpec("big", ["true"], tmp_path / "big.log", stdin=bytes((1 << 20) + 1))


def test_stop_stops_all_and_no_process_remains(tmp_path: Path) -> None:
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    children = [spec(tmp_path, f"w{i}", sleeper, f"w{i}") for i in range(3)]
    with supervising(children) as (sup, result):
        for child in children:
            wait_for(lambda c=child: "hello" in log_text(c), f"{child.name} output")
        pids = [s.pid for s in sup.status()]
        assert all(pid is not None and alive(pid) for pid in pids)
    assert result["rc"] == 0
    for pid in pids:
        assert pid is not None and not alive(pid)
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # already reaped by the supervisor: no zombie
    for st in sup.status():
        assert st.state == "stopped" and st.pid is None and st.last_exit == -signal.SIGTERM


def test_child_ignoring_sigterm_is_killed_after_stop_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flowcast.supervisor")
    ignorer = script(tmp_path, "ignorer.py", IGNORER)
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    children = [spec(tmp_path, "stubborn", ignorer), spec(tmp_path, "polite", sleeper, "polite")]
    with supervising(children, stop_timeout=0.3) as (sup, result):
        wait_for(lambda: "ready" in log_text(children[0]), "SIGTERM ignored")
        wait_for(lambda: "hello" in log_text(children[1]), "polite output")
        pids = {s.name: s.pid for s in sup.status()}
        began = time.monotonic()
        sup.stop()
        wait_for(lambda: "rc" in result, "run() to return")
        elapsed = time.monotonic() - began
    assert result["rc"] == 1  # not a clean stop: something needed SIGKILL
    assert elapsed >= 0.3
    states = by_name(sup)
    assert states["stubborn"].last_exit == -signal.SIGKILL
    assert states["polite"].last_exit == -signal.SIGTERM
    assert all(pid is not None and not alive(pid) for pid in pids.values())
    killed = [r.house for r in caplog.records if getattr(r, "event", None) == "killed"]
    assert killed == ["stubborn"]


def test_status_file(tmp_path: Path) -> None:
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    status_path = tmp_path / "run" / "status.json"  # run/ is created by the supervisor
    assert read_status(status_path) is None
    children = [spec(tmp_path, "manor", sleeper, "manor"), spec(tmp_path, "worker1", sleeper, "worker1")]

    def doc() -> dict[str, Any] | None:
        try:
            return json.loads(status_path.read_text())  # atomic: never a partial file
        except FileNotFoundError:
            return None

    with supervising(children, status_path=status_path, healthy_after=0.2) as (sup, _):
        # the move to "running" is timer-driven and must be written too
        running = wait_for(
            lambda: (d := doc()) and all(h["state"] == "running" for h in d["houses"]) and d,
            "status file showing both running",
        )
        assert running["supervisor_pid"] == os.getpid()
        assert read_status(status_path)["alive"] is True  # type: ignore[index]
        assert running["state"] == "running"
        assert abs(running["updated"] - time.time()) < 5
        assert [h["name"] for h in running["houses"]] == ["manor", "worker1"]
        live = {s.name: s for s in sup.status()}
        for house in running["houses"]:
            assert set(house) == {"name", "pid", "state", "restarts", "started_at", "last_exit", "next_start", "last_error"}
            assert house["pid"] == live[house["name"]].pid
            assert house["started_at"] == live[house["name"]].started_at
            assert house["restarts"] == 0 and house["last_exit"] is None and house["next_start"] is None
    final = doc()
    assert final is not None and final["state"] == "stopped"
    assert [h["state"] for h in final["houses"]] == ["stopped", "stopped"]
    assert all(h["pid"] is None and h["last_exit"] == -signal.SIGTERM for h in final["houses"])
    assert [p.name for p in status_path.parent.iterdir()] == ["status.json"]  # no temp files left
    assert read_status(status_path)["alive"] is False  # type: ignore[index]


def count_selects(sup: Supervisor) -> list[int]:
    """Count the supervisor loop's selector waits (white box: the idle-means-idle check)."""
    calls = [0]
    real_select = sup._selector.select

    def counting_select(timeout: float | None = None) -> Any:
        calls[0] += 1
        return real_select(timeout)

    sup._selector.select = counting_select  # type: ignore[method-assign]
    return calls


def test_idle_supervisor_blocks_instead_of_polling(tmp_path: Path) -> None:
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    children = [spec(tmp_path, "manor", sleeper, "manor")]
    sup = Supervisor(children, handle_signals=False, healthy_after=0.05)
    calls = count_selects(sup)
    thread = threading.Thread(target=sup.run)
    thread.start()
    try:
        wait_for(lambda: by_name(sup)["manor"].state == "running", "manor healthy")
        before = calls[0]
        threading.Event().wait(0.3)  # a measuring window, not synchronisation
        assert calls[0] - before <= 1  # nothing to do: one blocking select, no timer
    finally:
        sup.stop()
        thread.join(10)
    assert not thread.is_alive()


def test_stop_before_run_starts_nothing(tmp_path: Path) -> None:
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    child = spec(tmp_path, "manor", sleeper, "manor")
    sup = Supervisor([child], handle_signals=False)
    sup.stop()
    assert sup.run() == 0
    assert not child.log.exists()
    assert [s.state for s in sup.status()] == ["stopped"]
    with pytest.raises(RuntimeError):
        sup.run()


def test_invalid_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Supervisor([ChildSpec("a", ["true"], tmp_path / "a"), ChildSpec("a", ["true"], tmp_path / "b")])
    with pytest.raises(ValueError):
        Supervisor([], backoff_initial=2.0, backoff_max=1.0)
    with pytest.raises(ValueError):
        ChildSpec("a", [], tmp_path / "a")


def test_signal_handlers_need_main_thread() -> None:
    sup = Supervisor([])
    result: dict[str, BaseException] = {}

    def target() -> None:
        try:
            sup.run()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(5)
    assert isinstance(result.get("error"), RuntimeError)


# ------------------------------------------------------- supervisor as a process


@contextmanager
def runner_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, list[int]]]:
    """Start RUNNER in a subprocess; yield it, its status path and its children's pids."""
    runner = script(tmp_path, "runner.py", RUNNER)
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    status_path = tmp_path / "status.json"
    logdir = tmp_path / "logs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with open(tmp_path / "runner.log", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(runner), str(status_path), str(logdir), str(sleeper)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    pids: list[int] = []
    try:
        for name in ("manor", "worker1"):
            wait_for(lambda n=name: "hello" in log_text_path(logdir / f"{n}.log"), f"{name} output")

        def read_pids() -> list[int] | None:
            d = json.loads(status_path.read_text())
            got = [h["pid"] for h in d["houses"]]
            return got if all(got) else None

        pids = wait_for(read_pids, "pids in status file")
        assert all(alive(p) for p in pids)
        yield proc, status_path, pids
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        for pid in pids:  # never leave sleepers behind, even when the test failed
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def log_text_path(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_supervisor_process_stops_children(tmp_path: Path, signum: int) -> None:
    with runner_process(tmp_path) as (proc, status_path, pids):
        proc.send_signal(signum)
        assert proc.wait(10) == 0, (tmp_path / "runner.log").read_text()
        assert not any(alive(p) for p in pids)
        final = json.loads(status_path.read_text())
        assert final["state"] == "stopped"
        assert all(h["state"] == "stopped" and h["pid"] is None for h in final["houses"])


def test_children_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    """kill -9 of the supervisor: PR_SET_PDEATHSIG makes the kernel SIGTERM the houses."""
    with runner_process(tmp_path) as (proc, status_path, pids):
        assert read_status(status_path)["alive"] is True  # type: ignore[index]
        proc.kill()
        proc.wait(5)
        wait_for(lambda: not any(alive(p) for p in pids), "orphaned houses to die")
        stale = read_status(status_path)
        assert stale is not None and stale["state"] == "running" and stale["alive"] is False


# On SIGTERM: notes it, takes ``argv[3]`` seconds to finish (a house draining), notes its exit.
SLOW_STOPPER = """\
import os, signal, sys, time
name, notes, takes = sys.argv[1], sys.argv[2], float(sys.argv[3])
def note(what):
    fd = os.open(notes, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{name} {what}\\n".encode())
    os.close(fd)
def stop(_signum, _frame):
    note("term")
    time.sleep(takes)
    note("exit")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
note("ready")
time.sleep(60)
"""


def test_a_stop_goes_stage_by_stage_and_waits_each_stage_its_drain(tmp_path: Path) -> None:
    code = script(tmp_path, "slow.py", SLOW_STOPPER)
    notes = tmp_path / "notes"
    children = [
        spec(tmp_path, "manor", code, "manor", str(notes), "0.1", stop_stage=2),
        spec(tmp_path, "worker", code, "worker", str(notes), "0.8", stop_stage=0, drain=1.5),
        spec(tmp_path, "cache", code, "cache", str(notes), "0.1", stop_stage=1),
    ]
    with supervising(children, stop_timeout=0.3) as (sup, result):
        wait_for(lambda: notes.exists() and notes.read_text().count("ready") == 3, "all three ready")
        sup.stop()
        wait_for(lambda: "rc" in result, "run() to return", timeout=10)
    assert result["rc"] == 0  # the worker's 0.8 s was within its drain plus stop_timeout: no SIGKILL
    said = [line for line in notes.read_text().splitlines() if not line.endswith("ready")]
    # each stage is told only once the one before it has exited
    assert said == ["worker term", "worker exit", "cache term", "cache exit", "manor term", "manor exit"]
    assert all(s.last_exit == 0 for s in sup.status())
