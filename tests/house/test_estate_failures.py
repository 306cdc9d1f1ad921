"""`flowcast run` on an estate whose house cannot start: the console says why, the house is held,
the command exits non-zero, `flowcast status` shows the error; a second `flowcast run` of a running
estate is refused.  Real processes; every wait is bounded."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from flowcast.house.status import collect, render
from tests.house.estates import ROOT, free_udp_port, idle_flow, start_estate, stop_estate, wait_for, write_flow

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process semantics")


def _layout(tmp_path, flow: str, port: int | None = None):
    roads = f"roads:\n  main: {{port: {port}, acceptance: always}}\n" if port else ""
    path = tmp_path / "est.yaml"
    path.write_text(f"estate: est\n{roads}houses:\n  - {{name: manor, flow: {flow}, manor: true}}\n")
    return path


def _run_to_end(layout, timeout: float = 90.0) -> tuple[int, str, float]:
    started = time.monotonic()
    process = start_estate(layout, houses=1)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_estate(process)
        raise AssertionError("flowcast run kept restarting a house that cannot start")
    return process.returncode, out.decode(errors="replace"), time.monotonic() - started


def test_a_flow_error_is_said_held_and_ends_the_run(tmp_path):
    flows = tmp_path / "flows"
    flows.mkdir()
    write_flow(flows / "bad.flo", "bad", "framer idle be active first rest\n  frame rest\n    do nosuchthing\n")
    code, out, took = _run_to_end(_layout(tmp_path, "flows/bad.flo"))
    assert code == 3, out
    located = f"{flows / 'bad.flo'}:7:5: error: unknown behaviour 'nosuchthing'"
    assert out.count(f"exited with code 2: {located}") == 5, out  # the reason, not only the code, and 5 times only
    assert f"manor held: it failed 5 times within 30 s; not restarting it until the supervisor is restarted; last error: {located}" in out
    assert "nothing left running: manor held" in out
    assert "Traceback" not in out
    snapshot = collect(tmp_path / "run" / "est")
    (house,) = snapshot["houses"]
    assert house["state"] == "held" and house["last_error"] == located
    text = render(snapshot)
    assert f"manor last error: {located}" in text and "failed too often, not restarted" in text


def test_a_taken_port_is_named(tmp_path):
    port = free_udp_port()
    flows = tmp_path / "flows"
    flows.mkdir()
    idle_flow(flows / "idle.flo", "idle")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", port))
        code, out, _ = _run_to_end(_layout(tmp_path, "flows/idle.flo", port))
    assert code == 3, out
    said = f"house manor cannot start: road main: UDP port {port} on 127.0.0.1 is taken by another process"
    assert f"exited with code 1: {said}" in out, out
    doc = json.loads((tmp_path / "run" / "est" / "supervisor.json").read_text())
    assert doc["houses"][0]["last_error"].startswith(said)


def test_a_second_run_of_a_running_estate_is_refused(tmp_path):
    flows = tmp_path / "flows"
    flows.mkdir()
    idle_flow(flows / "idle.flo", "idle")
    layout = _layout(tmp_path, "flows/idle.flo", free_udp_port())
    first = start_estate(layout, houses=1)
    supervisor = tmp_path / "run" / "est" / "supervisor.json"
    try:
        def house_pid():
            try:
                return json.loads(supervisor.read_text())["houses"][0]["pid"]
            except (FileNotFoundError, ValueError, KeyError, IndexError):
                return None

        pid = wait_for(house_pid, what="the first estate's house")
        second = subprocess.run([sys.executable, "-m", "flowcast.cli.main", "run", str(layout), "--houses", "1"],
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert f"flowcast run: estate est is already running under supervisor pid {first.pid}" in second.stderr
        assert house_pid() == pid and json.loads(supervisor.read_text())["supervisor_pid"] == first.pid  # untouched
    finally:
        code, out = stop_estate(first)
    assert code == 0, out


def test_after_kill_9_of_the_supervisor_status_shows_no_house_running(tmp_path):
    import os
    import signal

    from flowcast.house.status import pid_alive

    flows = tmp_path / "flows"
    flows.mkdir()
    idle_flow(flows / "idle.flo", "idle")
    estate = start_estate(_layout(tmp_path, "flows/idle.flo", free_udp_port()), houses=1)
    run = tmp_path / "run" / "est"
    try:
        house = wait_for(lambda: (h := collect(run)["houses"]) and h[0]["alive"] and h[0]["state"] in ("starting", "running") and h[0],
                         what="a live house")
        os.kill(estate.pid, signal.SIGKILL)
        estate.wait(10)
        wait_for(lambda: not pid_alive(house["pid"]) or _zombie(house["pid"]), what="the house to die with its supervisor")
        snapshot = collect(run)
    finally:
        if estate.poll() is None:
            estate.kill()
        estate.wait(10)
    assert snapshot["supervisor"]["alive"] is False
    (shown,) = snapshot["houses"]
    assert shown["alive"] is False and shown["uptime"] is None
    text = render(snapshot)
    assert "NOT RUNNING" in text and f"gone ({shown['state']})" in text


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2 :].startswith(b"Z")


def test_a_house_pid_that_is_not_the_supervisors_child_is_not_alive(tmp_path):
    """A live pid that is no child of the supervisor is a reused pid or an orphan on its way out."""
    import os

    run = tmp_path / "run"
    (run / "status").mkdir(parents=True)
    me = os.getpid()  # alive, and certainly not the child of pid 4242
    (run / "supervisor.json").write_text(json.dumps({
        "supervisor_pid": 4242, "updated": time.time(), "state": "running",
        "houses": [{"name": "manor", "pid": me, "state": "running", "restarts": 0, "started_at": time.time() - 5,
                    "last_exit": None, "next_start": None, "last_error": None}],
    }))
    (shown,) = collect(run, alive=lambda pid: True, parent=lambda pid: os.getppid())["houses"]
    assert shown["alive"] is False and shown["note"] == f"pid {me} is no longer its supervisor's child"
    assert "gone (running)" in render(collect(run, alive=lambda pid: True, parent=lambda pid: os.getppid()))
    (shown,) = collect(run, alive=lambda pid: True, parent=lambda pid: 4242)["houses"]
    assert shown["alive"] is True


def test_a_remote_that_never_joins_is_shown_with_the_address_tried_and_the_last_answer(tmp_path):
    """Nothing listens at the remote's port: status says where the manor tries and what came back."""
    flows = tmp_path / "flows"
    flows.mkdir()
    idle_flow(flows / "idle.flo", "idle")
    nobody = free_udp_port()
    path = tmp_path / "est.yaml"
    path.write_text(
        f"estate: est\nroads:\n  main:\n    port: {free_udp_port()}\n    acceptance: always\n"
        f"    remotes:\n      - {{estate: far, host: 127.0.0.1, port: {nobody}}}\n"
        "houses:\n  - {name: manor, flow: flows/idle.flo, manor: true}\n"
    )
    process = start_estate(path, houses=1)
    try:
        def tried():
            snapshot = collect(tmp_path / "run" / "est")
            road = snapshot["roads"].get("main") or {}
            tries = (road.get("joining") or {}).get("far") or {}
            return snapshot if tries.get("answer") == "timeout" else None

        snapshot = wait_for(tried, timeout=30, what="a join try answered by nothing")
    finally:
        code, out = stop_estate(process)
    assert code == 0, out
    line = next(line for line in render(snapshot).splitlines() if line.strip().startswith("far "))
    assert f"not joined; trying 127.0.0.1:{nobody}, " in line and "last: no answer (nothing there" in line, line
