"""Two estates on two "hosts": Linux network namespaces joined by a veth pair.

Each test gets a fresh pair of namespaces ``fc-a-<pid>`` / ``fc-b-<pid>``
joined by veths ``fca<pid>`` (10.X.Y.1/24) and ``fcb<pid>`` (10.X.Y.2/24)
with an MTU of 1,280 (the IPv6 minimum, the smallest path there is),
writes the ping-pong layouts (houses/pingpong-*.yaml) into tmp_path with
each road bound to its namespace's veth address, and runs each estate as
``ip netns exec NS python -m flowcast.cli.main run LAYOUT``: the road
traffic really crosses a (virtual) wire between two network stacks.

* ``test_pingpong_across_namespaces``: five volleys, alpha sees beta alive
  on road ``main``, the routes are counted, the veth packet counters moved,
  and SIGTERM stops both estates cleanly (exit 0, no house left).
* ``test_denial_across_namespaces``: beta's policy does not allow the write
  of ``ball.in``; beta's router denies it and routes an error back to
  alpha's ``ball.out``, which alpha's policy accepts.

Skipped only where the machine does not permit it (not root, no ``ip``,
``ip netns add`` refused).  Nothing sleeps to synchronise: every wait polls
a condition against a bounded deadline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="network namespaces are Linux-only")

REPO = Path(__file__).resolve().parents[2]
FLOWS = REPO / "flows"
NAME = re.compile(r"^fc-[ab]-(\d+)$")
ALPHA_PORT, BETA_PORT = 7530, 7531
#: The veths' MTU: the IPv6 minimum, the smallest a path between two hosts may have.  A road must not
#: depend on anything larger (roads between hosts send 1,232-byte datagrams: transport/roadmtu.py).
MTU = 1280
POLL = 0.1
WAIT = 30.0  # upper bound of every wait; the whole file normally takes well under 15 s
STOP_WAIT = 15.0  # the supervisor's own stop_timeout is 5 s


# -- helpers ----------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def _wait_for(condition: Callable[[], Any], what: str, timeout: float = WAIT, describe: Callable[[], str] | None = None) -> Any:
    """Poll ``condition`` every POLL seconds until it is truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = f"\n{describe()}" if describe is not None else ""
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(POLL)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_namespaces() -> None:
    """Delete namespaces left by an earlier run of this file whose pid is dead."""
    listing = _ip("netns", "list", check=False).stdout
    for line in listing.splitlines():
        words = line.split()
        if not words:
            continue
        match = NAME.match(words[0])
        if match and not _pid_alive(int(match.group(1))):
            _kill_namespace_processes(words[0])
            _ip("netns", "del", words[0], check=False)


def _kill_namespace_processes(ns: str) -> None:
    """SIGKILL whatever still runs in ``ns`` (only our estates ever run there)."""
    done = _ip("netns", "pids", ns, check=False)
    for word in done.stdout.split():
        try:
            os.kill(int(word), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass


def _link_counters(ns: str, dev: str) -> tuple[int, int]:
    """(rx packets, tx packets) of ``dev`` in namespace ``ns``."""
    stats = json.loads(_ip("-n", ns, "-s", "-j", "link", "show", "dev", dev).stdout)[0]["stats64"]
    return stats["rx"]["packets"], stats["tx"]["packets"]


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # not written yet (writes are atomic)
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes whose argv contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(text.encode() in arg for arg in argv):
            found.append(f"{entry.name}: {b' '.join(argv).decode(errors='replace')}")
    return found


# -- fixtures ----------------------------------------------------------------------


@dataclass
class Hosts:
    """Two namespaces joined by a veth pair."""

    a: str
    b: str
    dev_a: str
    dev_b: str
    addr_a: str
    addr_b: str


@pytest.fixture(scope="module")
def flowcast_cmd() -> list[str]:
    """How to run the ``flowcast`` command with this interpreter."""
    module = [sys.executable, "-m", "flowcast.cli.main"]
    done = subprocess.run([*module, "--help"], capture_output=True, text=True, timeout=30, cwd=REPO)
    if done.returncode == 0 and "run" in done.stdout:
        return module
    script = Path(sys.executable).parent / "flowcast"
    if not script.exists():
        pytest.fail(f"neither 'python -m flowcast.cli.main' ({done.stderr.strip()}) nor {script} runs flowcast")
    return [str(script)]


@pytest.fixture
def hosts(request: pytest.FixtureRequest) -> Iterator[Hosts]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (euid is not 0)")
    if shutil.which("ip") is None:
        pytest.skip("no 'ip' binary (iproute2) on PATH")
    _remove_stale_namespaces()
    pid = os.getpid()
    a, b = f"fc-a-{pid}", f"fc-b-{pid}"
    for ns in (a, b):  # a previous test of this process that could not clean up
        if ns in _ip("netns", "list", check=False).stdout.split():
            _kill_namespace_processes(ns)
            _ip("netns", "del", ns, check=False)
    made: list[str] = []

    def teardown() -> None:
        for ns in made:
            _kill_namespace_processes(ns)
        for ns in made:
            _ip("netns", "del", ns, check=False)  # takes its veth end, and so the pair, with it

    request.addfinalizer(teardown)
    for ns in (a, b):
        done = _ip("netns", "add", ns, check=False)
        if done.returncode != 0:
            pytest.skip(f"'ip netns add {ns}' failed: {done.stderr.strip() or f'exit {done.returncode}'}")
        made.append(ns)
    x, y = 100 + (pid >> 8) % 100, pid % 256
    dev_a, dev_b = f"fca{pid}", f"fcb{pid}"  # at most 10 characters (IFNAMSIZ is 16)
    addr_a, addr_b = f"10.{x}.{y}.1", f"10.{x}.{y}.2"
    _ip("link", "add", dev_a, "netns", a, "type", "veth", "peer", "name", dev_b, "netns", b)
    for ns, dev, addr in ((a, dev_a, addr_a), (b, dev_b, addr_b)):
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "set", dev, "mtu", str(MTU), "up")
    # Both ends up and carrying: the kernel reports the veth LOWER_UP.
    for ns, dev in ((a, dev_a), (b, dev_b)):
        _wait_for(
            lambda ns=ns, dev=dev: "LOWER_UP" in _ip("-n", ns, "link", "show", "dev", dev).stdout,
            f"{dev} in {ns} to come up",
            timeout=10,
        )
    yield Hosts(a, b, dev_a, dev_b, addr_a, addr_b)


@dataclass
class Estate:
    name: str
    layout: Path
    run: Path
    out: Path
    proc: subprocess.Popen[bytes] | None = None
    spare: list[Any] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return self.run / "logs" / "manor.log"

    @property
    def status(self) -> Path:
        return self.run / "status" / "manor.json"

    def tail(self) -> str:
        return (
            f"--- {self.name} output ---\n{_read(self.out)[-2000:]}"
            f"--- {self.name} manor.log ---\n{_read(self.log)[-3000:]}"
            f"--- {self.name} status ---\n{_read(self.status)[-2000:]}\n"
        )


def _layout(tmp: Path, estate: str, host: str, port: int, remote: tuple[str, str, int] | None, policy: list[str], flow: Path, house: str) -> Estate:
    run = tmp / "run" / estate
    lines = [
        f"# estate {estate}: houses/pingpong-{estate}.yaml on a network namespace's veth address",
        f"estate: {estate}",
        f"keep: {tmp / 'keeps' / estate}",
        f"run: {run}",
        "roads:",
        "  main:",
        f"    host: {host}",
        f"    port: {port}",
        "    acceptance: always",
    ]
    if remote is not None:
        lines += ["    remotes:", f"      - {{estate: {remote[0]}, host: {remote[1]}, port: {remote[2]}}}"]
    lines += ["policy:" + ("" if policy else " []"), *policy]
    lines += ["houses:", "  - name: manor", f"    flow: {flow}", f"    house: {house}", "    manor: true"]
    path = tmp / f"{estate}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return Estate(estate, path, run, tmp / f"{estate}.out")


def _pingpong(tmp: Path, hosts: Hosts, *, beta_allows: bool) -> tuple[Estate, Estate]:
    alpha = _layout(
        tmp, "alpha", hosts.addr_a, ALPHA_PORT, None,
        [
            "  - allow: write",
            "    estate: beta",
            '    share: "ball.back"',
            # errors routed back to the share that sent (ball.out), e.g. beta's denial
            "  - allow: write",
            "    estate: beta",
            '    share: "ball.out"',
            "    tag: error",
        ],
        FLOWS / "ping.flo", "ping",
    )
    beta = _layout(
        tmp, "beta", hosts.addr_b, BETA_PORT, ("alpha", hosts.addr_a, ALPHA_PORT),
        ["  - allow: write", "    estate: alpha", '    share: "ball.in"'] if beta_allows else [],
        FLOWS / "pong.flo", "pong",
    )
    return alpha, beta


@pytest.fixture
def estates(hosts: Hosts, flowcast_cmd: list[str], tmp_path: Path) -> Iterator[Callable[[Estate, str], Estate]]:
    """Start estates in namespaces; whatever is still running at the end is stopped."""
    started: list[Estate] = []

    def start(estate: Estate, ns: str) -> Estate:
        out = open(estate.out, "wb")
        estate.spare.append(out)
        estate.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, *flowcast_cmd, "run", str(estate.layout)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
        )
        started.append(estate)
        return estate

    yield start
    for estate in started:
        proc = estate.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for estate in started:
        proc = estate.proc
        if proc is not None:
            try:
                proc.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()  # its houses get SIGTERM from the kernel (PR_SET_PDEATHSIG)
                proc.wait(5)
        for handle in estate.spare:
            handle.close()


def _stop(*estates: Estate) -> None:
    """SIGTERM every estate's ``flowcast run``; each must exit 0, leaving no house."""
    for estate in estates:
        assert estate.proc is not None and estate.proc.poll() is None, f"{estate.name} ended early\n{estate.tail()}"
        estate.proc.send_signal(signal.SIGTERM)
    for estate in estates:
        assert estate.proc is not None
        try:
            code = estate.proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{estate.name}: 'flowcast run' still running {STOP_WAIT:.0f}s after SIGTERM\n{estate.tail()}")
        assert code == 0, f"{estate.name}: 'flowcast run' exited {code}\n{estate.tail()}"
        supervisor = _read_json(estate.run / "supervisor.json")
        assert supervisor is not None and supervisor["state"] == "stopped", supervisor
        assert [h["state"] for h in supervisor["houses"]] == ["stopped"], supervisor
        assert "house manor stopped (SIGTERM)" in _read(estate.log), estate.tail()
        assert "Traceback" not in _read(estate.log), estate.tail()  # closing after the scheduler, too
    left = [line for estate in estates for line in _processes_mentioning(str(estate.layout))]
    assert not left, f"processes left after the estates stopped: {left}"


def _counts(estate: Estate) -> dict[str, int]:
    status = _read_json(estate.status)
    return status.get("counts", {}) if status else {}


# -- tests ----------------------------------------------------------------------------


def test_pingpong_across_namespaces(hosts: Hosts, estates: Callable[[Estate, str], Estate], tmp_path: Path) -> None:
    alpha, beta = _pingpong(tmp_path, hosts, beta_allows=True)
    before_a, before_b = _link_counters(hosts.a, hosts.dev_a), _link_counters(hosts.b, hosts.dev_b)
    estates(alpha, hosts.a)
    estates(beta, hosts.b)

    def describe() -> str:
        return alpha.tail() + beta.tail()

    def volleys() -> bool:
        for estate in (alpha, beta):
            assert estate.proc is not None
            if estate.proc.poll() is not None:
                pytest.fail(f"{estate.name}: 'flowcast run' exited {estate.proc.returncode}\n{describe()}")
        # "ping: ball.back value=5" is shown (flushed) as ping enters its frame 'over'
        return "ping: ball.back value=5" in _read(alpha.log) and _read(beta.log).count("pong: ball.in value=") >= 5

    _wait_for(volleys, "five volleys between the namespaces", describe=describe)
    pongs = re.findall(r"pong: ball\.in value=(\d+)", _read(beta.log))
    assert pongs == ["1", "2", "3", "4", "5"], describe()
    for estate in (alpha, beta):
        assert "Traceback" not in _read(estate.log), describe()

    # Status files are written once a second: wait for one that has the whole game.
    _wait_for(lambda: _counts(alpha).get("from_road", 0) >= 5 and _counts(beta).get("from_road", 0) >= 5,
              "status files counting the five volleys", describe=describe)
    a, b = _read_json(alpha.status), _read_json(beta.status)
    assert a is not None and b is not None
    assert a["estate"] == "alpha" and a["manor"] is True
    assert a["roads"] == {"main": {"beta": "alive"}}, a["roads"]
    assert b["roads"] == {"main": {"alpha": "alive"}}, b["roads"]
    assert a["ports"] == {"main": [hosts.addr_a, ALPHA_PORT]}, a["ports"]
    assert b["ports"] == {"main": [hosts.addr_b, BETA_PORT]}, b["ports"]
    for status in (a, b):
        counts = status["counts"]
        assert counts["sent"] == 5 and counts["to_road"] == 5, counts
        assert counts["from_road"] == 5 and counts["delivered"] == 5, counts
        assert not status["denials"], status["denials"]
        assert status["policy"].get("allowed") == 5, status["policy"]
    assert ["ball.out@manor.alpha/main", "ball.in@.beta/main", 5] in a["routes"], a["routes"]
    assert ["ball.out@manor.beta/main", "ball.back@.alpha/main", 5] in a["routes"], a["routes"]
    assert ["ball.out@manor.beta/main", "ball.back@.alpha/main", 5] in b["routes"], b["routes"]
    assert ["ball.out@manor.alpha/main", "ball.in@.beta/main", 5] in b["routes"], b["routes"]

    # The volleys crossed the veth: at least five datagrams each way on each end.
    after_a, after_b = _link_counters(hosts.a, hosts.dev_a), _link_counters(hosts.b, hosts.dev_b)
    for name, before, after in (("alpha", before_a, after_a), ("beta", before_b, after_b)):
        assert after[0] - before[0] >= 5 and after[1] - before[1] >= 5, f"{name} veth rx/tx packets {before} -> {after}"

    _stop(alpha, beta)
    # Flow 'print' output reaches the log at the latest when the house exits.
    assert "ping-pong over: five volleys returned" in _read(alpha.log), alpha.tail()


def test_denial_across_namespaces(hosts: Hosts, estates: Callable[[Estate, str], Estate], tmp_path: Path) -> None:
    alpha, beta = _pingpong(tmp_path, hosts, beta_allows=False)
    estates(alpha, hosts.a)
    estates(beta, hosts.b)

    def describe() -> str:
        return alpha.tail() + beta.tail()

    def denied_and_answered() -> bool:
        for estate in (alpha, beta):
            assert estate.proc is not None
            if estate.proc.poll() is not None:
                pytest.fail(f"{estate.name}: 'flowcast run' exited {estate.proc.returncode}\n{describe()}")
        return _counts(beta).get("denied", 0) >= 1 and _counts(alpha).get("from_road", 0) >= 1

    _wait_for(denied_and_answered, "beta's denial of ball.in and its error at alpha", describe=describe)
    b, a = _read_json(beta.status), _read_json(alpha.status)
    assert a is not None and b is not None
    assert b["roads"] == {"main": {"alpha": "alive"}}, b["roads"]
    counts = b["counts"]
    assert counts["denied"] == 1 and counts.get("errors_sent") == 1, counts
    assert "delivered" not in counts and "from_road" not in counts, counts
    assert b["policy"].get("denied") == 1 and not b["policy"].get("allowed"), b["policy"]
    (denial,) = b["denials"]
    assert denial["kind"] == "denied", denial
    assert denial["dst"] == "ball.in@.beta/main" and denial["src"] == "ball.out@manor.alpha/main", denial
    assert "'ball.in'" in denial["reason"] and "'alpha'" in denial["reason"] and "denied by policy" in denial["reason"], denial
    # The error report crossed back and landed in alpha's ball.out (alpha's policy allows it).
    counts = a["counts"]
    assert counts["sent"] == 1 and counts["to_road"] == 1, counts
    assert counts["from_road"] == 1 and counts["delivered"] == 1 and "denied" not in counts, counts
    assert ["ball.in@manor.beta/main", "ball.out@manor.alpha/main", 1] in a["routes"], a["routes"]
    # ping never got its ball back; pong never saw one
    assert "ping: ball.back" not in _read(alpha.log) and "pong: ball.in" not in _read(beta.log), describe()

    _stop(alpha, beta)
    assert "ping-pong over" not in _read(alpha.log), alpha.tail()
