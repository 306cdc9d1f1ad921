"""The multi-estate examples run as real processes on loopback.

Each test copies the example's layouts (houses/telemetry-*.yaml,
houses/chat-*.yaml) into tmp_path with free UDP ports, keep and run
directories there and absolute flow paths, starts every estate with
``python -m flowcast.cli.main run LAYOUT --houses N``, polls the houses'
logs (bounded, no fixed sleeps) for the expected outcome, then stops all
estates with SIGTERM and checks they exit 0.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HOUSES = ROOT / "houses"
WAIT = 30.0  # bound on any one wait for an outcome
STOP = 15.0  # bound on an estate's clean stop

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="estates run on Linux")


def free_udp_ports(n: int) -> list[int]:
    """``n`` distinct loopback UDP ports that were free a moment ago."""
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def copy_layouts(names: list[str], tmp_path: Path) -> dict[str, Path]:
    """Copies of ``houses/NAME.yaml`` (estate NAME) in tmp_path: free ports, local dirs, absolute flows."""
    ports = dict(zip(names, free_udp_ports(len(names))))
    copies = {}
    for name in names:
        source = HOUSES / f"{name}.yaml"
        layout = yaml.safe_load(source.read_text())
        assert layout["estate"] == name
        layout["keep"] = str(tmp_path / name / "keep")
        layout["run"] = str(tmp_path / name / "run")
        for road in layout["roads"].values():
            assert 7540 <= road["port"] <= 7559
            road["port"] = ports[name]
            for remote in road.get("remotes") or ():
                remote["port"] = ports[remote["estate"]]
        for entry in layout["houses"]:
            entry["flow"] = str((source.parent / entry["flow"]).resolve())
        copies[name] = tmp_path / f"{name}.yaml"
        copies[name].write_text(yaml.safe_dump(layout, sort_keys=False))
    return copies


class Estates:
    """Estate supervisors started as subprocesses; stopped (and checked) by :meth:`stop`."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, layout: Path, houses: int) -> None:
        out = open(self.tmp_path / f"{name}.out", "wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "flowcast.cli.main", "run", str(layout), "--houses", str(houses)],
            cwd=self.tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        out.close()

    def log(self, estate: str, yard: str) -> str:
        path = self.tmp_path / estate / "run" / "logs" / f"{yard}.log"
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for(self, what: str, check) -> None:  # type: ignore[no-untyped-def]
        """Poll ``check()`` until true, at most WAIT seconds; fail if an estate died."""
        deadline = time.monotonic() + WAIT
        while not check():
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    pytest.fail(f"estate {name} exited with {proc.returncode} while waiting for {what}\n{self.report()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} within {WAIT:g} s\n{self.report()}")
            time.sleep(0.1)

    def status(self, estate: str, yard: str) -> dict:
        """A house's status file (written once a second), or {} before the first."""
        try:
            return json.loads((self.tmp_path / estate / "run" / "status" / f"{yard}.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def report(self) -> str:
        parts = []
        for path in sorted(self.tmp_path.glob("*/run/logs/*.log")) + sorted(self.tmp_path.glob("*.out")):
            parts.append(f"--- {path.relative_to(self.tmp_path)}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def stop(self) -> dict[str, int | None]:
        """SIGTERM every estate; their exit codes (None: still running after STOP seconds, then killed)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + STOP
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes[name] = None
        self.procs.clear()
        return codes


@pytest.fixture
def estates(tmp_path):
    running = Estates(tmp_path)
    yield running
    running.stop()  # a failed test still leaves no estate behind


SUMMARY = re.compile(r"^hub: (\w+)/(\w+) n=(\d+) seq=(\d+) ", re.M)


def test_telemetry_fan_in(estates, tmp_path):
    """Both sensors of both field estates reach the hub's aggregator, in sequence."""
    fields = ["telemetry-north", "telemetry-south"]
    layouts = copy_layouts(["telemetry-hub", *fields], tmp_path)
    estates.start("telemetry-hub", layouts["telemetry-hub"], 2)  # manor, aggregator
    for name in fields:
        estates.start(name, layouts[name], 3)  # manor, sensor1, sensor2
    wanted = {(field.partition("-")[2], f"sensor{i}") for field in fields for i in (1, 2)}

    def latest() -> dict[tuple[str, str], tuple[int, int]]:
        found = {}
        for estate, yard, n, seq in SUMMARY.findall(estates.log("telemetry-hub", "aggregator")):
            found[estate, yard] = (int(n), int(seq))
        return found

    # every sensor yard of every field estate, with a few readings each
    estates.wait_for("summary of every sensor", lambda: all(latest().get(key, (0, 0))[0] >= 3 for key in wanted))
    found = latest()
    assert set(found) == wanted
    for key, (n, seq) in found.items():
        assert n == seq, f"{key}: {n} readings but sequence number {seq} (lost or repeated readings)"
    for field in fields:
        assert "field roads: flowcast.road.main.presence telemetry-hub='alive'" in estates.log(field, "manor")
        for yard in ("sensor1", "sensor2"):
            assert "Traceback" not in estates.log(field, yard)
    assert "hub roads:" in estates.log("telemetry-hub", "manor")
    # the hub's manor took the readings from the road; its policy refused none
    def from_road() -> int:
        return estates.status("telemetry-hub", "manor").get("counts", {}).get("from_road", 0)

    estates.wait_for("the hub manor's status", lambda: from_road() >= 12)
    assert estates.status("telemetry-hub", "manor")["denials"] == []
    assert estates.stop() == {name: 0 for name in ["telemetry-hub", *fields]}


def script(name: str) -> list[str]:
    text = (ROOT / "flows" / f"chat-{name}.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_chat_between_estates(estates, tmp_path):
    """Every member prints every other member's lines, in order, then says the chat is over."""
    members = ["ann", "bob", "carol"]
    layouts = copy_layouts([f"chat-{name}" for name in members], tmp_path)
    for name in members:
        estates.start(f"chat-{name}", layouts[f"chat-{name}"], 1)
    scripts = {name: script(name) for name in members}
    assert all(scripts.values())

    def over() -> bool:
        return all(f"{name}: chat over" in estates.log(f"chat-{name}", "manor") for name in members)

    estates.wait_for("'chat over' from every member", over)
    for name in members:
        log = estates.log(f"chat-{name}", "manor")
        others = [other for other in members if other != name]
        for other in others:
            heard = [line[len(other) + 3 :] for line in log.splitlines() if line.startswith(f"[{other}] ")]
            assert heard == scripts[other], f"{name} heard from {other}"
        total = sum(len(scripts[other]) for other in others)
        assert f"{name}: chat over, heard {total} lines" in log
        assert f"[{name}] " not in log  # nobody hears themselves
    assert estates.stop() == {f"chat-{name}": 0 for name in members}
