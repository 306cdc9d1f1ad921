"""Helpers for multi-process estate tests: layouts in a temp dir, free ports, bounded waits."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
PLAY = Path(__file__).resolve().parent / "routeplay.py"


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_flow(path: Path, house: str, body: str) -> Path:
    path.write_text(f"house {house}\n\nload {PLAY}\n\n{body}\n")
    return path


def idle_flow(path: Path, house: str) -> Path:
    return write_flow(path, house, "framer idle be active first rest\n  frame rest\n    print resting\n")


def start_estate(layout: Path, houses: int | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "flowcast.cli.main", "run", str(layout)]
    if houses is not None:
        argv += ["--houses", str(houses)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)


def stop_estate(process: subprocess.Popen, timeout: float = 15.0) -> tuple[int, str]:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        raise AssertionError(f"estate did not stop within {timeout} s:\n{out.decode(errors='replace')}")
    return process.returncode, out.decode(errors="replace")


def house_pids(run: Path) -> list[int]:
    """The pids of the estate's houses, as its supervisor last wrote them (``RUN/supervisor.json``)."""
    try:
        houses = json.loads((run / "supervisor.json").read_text())["houses"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return []
    return [house["pid"] for house in houses if house.get("pid")]


def kill_estate(process: subprocess.Popen, run: Path) -> str:
    """SIGKILL the estate's houses, then its supervisor; its output.

    The houses first: a house whose supervisor dies is sent SIGTERM
    (PR_SET_PDEATHSIG) and stops cleanly, so killing the supervisor's
    process group alone tests a clean stop, not a kill -9.
    """
    for pid in house_pids(run):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.killpg(process.pid, signal.SIGKILL)
    out, _ = process.communicate(timeout=10)
    return out.decode(errors="replace")


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, every: float = 0.05, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something true; AssertionError after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def lines(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def status(run: Path, yard: str) -> dict:
    try:
        return json.loads((run / "status" / f"{yard}.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
