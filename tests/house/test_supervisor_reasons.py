"""The supervisor says why a child failed, holds one that keeps failing, and runs once per run folder.

Children are tiny Python scripts; every wait polls a condition against a
bounded deadline (the helpers of test_supervisor.py).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from pathlib import Path

import pytest

from flowcast.house.childproc import exit_reason, write_last_words
from flowcast.house.supervisor import EXIT_ALL_HELD, AlreadyRunning, ChildSpec, Supervisor, take_run_lock
from tests.house.test_supervisor import SLEEPER, by_name, log_text, script, spec, supervising, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process semantics")

# Leaves its last words (argv[1]) and exits 2, as a house with a flow error does.
SAYS_WHY = """\
import sys
from flowcast.house.childproc import write_last_words
print("a long traceback the console should not need", flush=True)
write_last_words(sys.argv[1], "flows/x.flo:3:7: error: unknown behaviour 'nosuch'\\nflows/x.flo:9:1: error: second")
sys.exit(2)
"""

# Says nothing on purpose: the reason is the last line of its log since its start.
DIES = """\
import sys
print("starting", flush=True)
print("ValueError: bad reading", flush=True)
sys.exit(4)
"""


def test_exit_reason_prefers_last_words_then_this_starts_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "h.log"
    words = tmp_path / "h.error"
    child = ChildSpec("h", ["true"], log, last_words=words)
    log.write_text("--- flowcast supervisor: starting h at T ---\nold: earlier start\n"
                   "--- flowcast supervisor: starting h at T ---\n\n")
    assert exit_reason(child) is None  # this start wrote nothing: not the earlier start's line
    with log.open("a") as out:
        out.write("OSError: nope\n\n")
    assert exit_reason(child) == "OSError: nope"
    write_last_words(words, "road main: UDP port 4000 on 127.0.0.1 is taken")
    assert exit_reason(child) == "road main: UDP port 4000 on 127.0.0.1 is taken"
    write_last_words(words, "x" * 10_000)  # bounded
    assert len(exit_reason(child) or "") == 4096


def test_reason_is_logged_and_kept_then_the_child_is_held(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="flowcast.supervisor")
    says = script(tmp_path, "says.py", SAYS_WHY)
    words = tmp_path / "run" / "says.error"
    words.parent.mkdir()
    child = ChildSpec("says", [sys.executable, str(says), str(words)], tmp_path / "logs" / "says.log", last_words=words,
                      env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    status_path = tmp_path / "run" / "supervisor.json"
    sup = Supervisor([child], handle_signals=False, backoff_initial=0.05, backoff_max=0.1,
                     start_limit_burst=3, start_limit_interval=30.0, status_path=status_path)
    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.setdefault("rc", sup.run()))
    thread.start()
    thread.join(20)  # it stops by itself: its only child is held
    assert not thread.is_alive(), "supervisor did not stop after its only child was held"
    assert result["rc"] == EXIT_ALL_HELD
    exits = [r for r in caplog.records if getattr(r, "event", None) == "exited"]
    assert len(exits) == 3  # burst 3: started three times, then held
    assert all(r.reason.startswith("flows/x.flo:3:7: error: unknown behaviour 'nosuch'") for r in exits)
    assert "exited with code 2: flows/x.flo:3:7: error: unknown behaviour 'nosuch'\n    flows/x.flo:9:1" in exits[0].getMessage()
    held = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "held"]
    assert held == ["says held: it failed 3 times within 30 s; not restarting it until the supervisor is restarted; "
                    "last error: flows/x.flo:3:7: error: unknown behaviour 'nosuch'\n    flows/x.flo:9:1: error: second"]
    assert [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "all_held"] == [
        "nothing left running: says held; the supervisor stops"]
    (house,) = json.loads(status_path.read_text())["houses"]
    assert house["state"] == "held" and house["last_exit"] == 2 and house["restarts"] == 2
    assert house["last_error"].startswith("flows/x.flo:3:7: error:")
    assert "traceback" not in house["last_error"]


def test_a_held_child_leaves_the_others_running(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="flowcast.supervisor")
    dies = spec(tmp_path, "dies", script(tmp_path, "dies.py", DIES))
    sleeper = spec(tmp_path, "sleeper", script(tmp_path, "sleeper.py", SLEEPER), "x")
    with supervising([dies, sleeper], start_limit_burst=2, start_limit_interval=30.0) as (sup, result):
        st = wait_for(lambda: (s := by_name(sup))["dies"].state == "held" and s, "the crasher to be held", timeout=10)
        assert st["dies"].last_error == "ValueError: bad reading" and st["dies"].last_exit == 4
        assert st["dies"].pid is None and st["dies"].next_start is None
        assert st["sleeper"].state in ("starting", "running") and st["sleeper"].pid is not None
        assert "hello" in wait_for(lambda: log_text(sleeper), "sleeper output")
        assert "rc" not in result  # still supervising the sleeper
    assert result["rc"] == 0
    assert [s.state for s in sup.status()] == ["held", "stopped"]  # held stays held after the stop
    reasons = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "exited" and r.house == "dies"]
    assert reasons == ["dies pid %d exited with code 4: ValueError: bad reading" % r.pid
                       for r in caplog.records if getattr(r, "event", None) == "exited" and r.house == "dies"]


def test_start_limit_can_be_turned_off_and_is_checked() -> None:
    with pytest.raises(ValueError):
        Supervisor([], start_limit_burst=-1)
    with pytest.raises(ValueError):
        Supervisor([], start_limit_interval=0)
    Supervisor([], start_limit_burst=0)  # 0: never hold, as systemd's StartLimitBurst=0


def test_run_lock_names_the_holder_and_goes_with_it(tmp_path: Path) -> None:
    path = tmp_path / "run" / "supervisor.lock"
    fd = take_run_lock(path)
    try:
        assert path.read_text() == f"{os.getpid()}\n"
        with pytest.raises(AlreadyRunning) as refused:
            take_run_lock(path)  # flock: a second open file conflicts even in the same process
        assert refused.value.pid == os.getpid()
        assert f"already running under supervisor pid {os.getpid()}" in str(refused.value)
        assert os.get_inheritable(fd) is False  # houses never hold their supervisor's lock
    finally:
        os.close(fd)
    fd = take_run_lock(path)  # released with its holder
    os.close(fd)


def test_an_exit_the_spec_names_in_hold_on_holds_at_once_other_children_exit_3_as_any_code(tmp_path: Path,
                                                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="flowcast.supervisor")
    refuses = script(tmp_path, "refuses.py", "import sys\nprint('x.sqlite3: it is empty (0 bytes)', flush=True)\nsys.exit(3)\n")
    held = ChildSpec("held", [sys.executable, str(refuses)], tmp_path / "held.log", hold_on=frozenset({3}))
    plain = ChildSpec("plain", [sys.executable, str(refuses)], tmp_path / "plain.log")
    sup = Supervisor([held, plain], handle_signals=False, backoff_initial=0.05, backoff_max=0.1,
                     start_limit_burst=3, start_limit_interval=30.0)
    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.setdefault("rc", sup.run()))
    thread.start()
    thread.join(20)
    assert not thread.is_alive() and result["rc"] == EXIT_ALL_HELD
    exits = [r.house for r in caplog.records if getattr(r, "event", None) == "exited"]
    assert exits.count("held") == 1 and exits.count("plain") == 3  # at once, against the start limit
    said = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "held"]
    assert "held held: it refused to start (exit 3: restarting cannot fix it); not restarting it until the supervisor is" \
           " restarted; last error: x.sqlite3: it is empty (0 bytes)" in said
    assert any(m.startswith("plain held: it failed 3 times") for m in said)
