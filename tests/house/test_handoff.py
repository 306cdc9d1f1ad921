"""What a supervisor hands its houses: the plan it read once, lane keys; and a clean stop while starting.

* A process of the same user that binds the manor's lane path is not heard
  as the manor by an estate's worker (its lane authenticates).
* Editing the layout while the estate runs does not change the plan of a
  worker restarted afterwards: it gets the layout text its siblings got.
* A SIGTERM while a house is still starting (a behaviour whose setup
  blocks) runs the closers registered so far, and the house exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import time

from flowcast.house.estate import lane_dir, open_house
from flowcast.house.handoff import Handoff
from flowcast.house.layout import load_layout
from flowcast.routing import Router
from flowcast.store import Store
from flowcast.transport.lane import LaneStack
from flowcast.transport.lanekeys import LaneKeys, new_secret
from flowcast.transport.ports import UxdPort, uxd_address
from tests.house.estates import idle_flow, lines, start_estate, stop_estate, wait_for, write_flow


def _supervised(run, yard: str) -> dict:
    try:
        houses = json.loads((run / "supervisor.json").read_text())["houses"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return {}
    return next((h for h in houses if h["name"] == yard), {})


def _log(tmp_path, yard: str) -> str:
    try:
        return (tmp_path / "run" / "beta" / "logs" / f"{yard}.log").read_text()
    except FileNotFoundError:
        return ""


def test_a_worker_does_not_take_a_process_on_the_manor_path_for_the_manor(tmp_path):
    flows = tmp_path / "flows"
    flows.mkdir()
    landed = tmp_path / "landed.jsonl"
    idle_flow(flows / "idle.flo", "idle")
    write_flow(flows / "sink.flo", "sink", f"framer keep be active first listen\n  frame listen\n    do routeplay record from inbox with out \"{landed}\"\n")
    (tmp_path / "beta.yaml").write_text(
        "estate: beta\nhouses:\n  - {name: manor, flow: flows/idle.flo, manor: true}\n  - {name: w1, flow: flows/sink.flo}\n"
    )
    layout = load_layout(tmp_path / "beta.yaml")
    house = open_house(layout, "w1", houses=2)
    sched = house.scheduler
    lanes = lane_dir(layout)
    # The manor is not running: its path is free, and any process of this user may bind it.
    fake = Router(Store(sched.clock.now, name="manor"), estate="beta", yard="manor", manor="manor", scheduler=sched)
    fake_lane = LaneStack(UxdPort(lanes, "manor", scheduler=sched), "manor", {"w1": uxd_address(lanes, "w1")}, scheduler=sched, acks=True)
    fake.attach_lane(fake_lane)
    try:
        fake.send("inbox@w1", {"evil": 1}, src="out")
        lane = house.router.lane
        end = time.monotonic() + 10
        while time.monotonic() < end and not lines(landed) and not lane.counts["lane_unauthenticated"]:
            sched.run(until=sched.clock.now() + 0.05)
        sched.run(until=sched.clock.now() + 0.3)  # time for a delivery, had the HELLO been believed
        assert lines(landed) == [], "the worker took a message from a process on the manor's path"
        assert house.router.counts["from_lane"] == 0 and lane.counts["lane_unauthenticated"] >= 1
        assert lane.authenticated
    finally:
        fake_lane.close()
        house.stop()
        house.run()


def test_a_restarted_worker_keeps_the_plan_the_estate_started_with(tmp_path):
    flows = tmp_path / "flows"
    flows.mkdir()
    idle_flow(flows / "idle.flo", "idle")
    write_flow(flows / "first.flo", "first", "framer f be active first go\n  frame go\n    print planned-first\n")
    write_flow(flows / "edited.flo", "edited", "framer f be active first go\n  frame go\n    print planned-edited\n")
    layout = tmp_path / "beta.yaml"
    text = "estate: beta\nhouses:\n  - {name: manor, flow: flows/idle.flo, manor: true}\n  - {name: w1, flow: flows/%s.flo}\n"
    layout.write_text(text % "first")
    run = tmp_path / "run" / "beta"
    estate = start_estate(layout, houses=2)
    try:
        first_pid = wait_for(lambda: "planned-first" in _log(tmp_path, "w1") and _supervised(run, "w1").get("pid"), what="w1 running")
        layout.write_text(text % "edited")  # an operator edits the layout while the estate runs
        os.kill(first_pid, signal.SIGKILL)
        wait_for(lambda: _log(tmp_path, "w1").count("planned-") >= 2, what="the restarted w1 to run its flow")
        assert _supervised(run, "w1")["restarts"] == 1
        assert "planned-edited" not in _log(tmp_path, "w1")
        assert _log(tmp_path, "w1").count("planned-first") >= 2
    finally:
        stop_estate(estate)


def test_sigterm_while_a_house_starts_runs_its_closers(tmp_path):
    flows = tmp_path / "flows"
    flows.mkdir()
    started, closed = tmp_path / "started.jsonl", tmp_path / "closed.jsonl"
    idle_flow(flows / "idle.flo", "idle")
    write_flow(flows / "slow.flo", "slow",
               f"framer f be active first go\n  frame go\n    do routeplay slowstart with started \"{started}\" closed \"{closed}\"\n")
    (tmp_path / "beta.yaml").write_text(
        "estate: beta\nhouses:\n  - {name: manor, flow: flows/idle.flo, manor: true}\n  - {name: w1, flow: flows/slow.flo}\n"
    )
    run = tmp_path / "run" / "beta"
    estate = start_estate(tmp_path / "beta.yaml", houses=2)
    try:
        pid = wait_for(lambda: lines(started) and lines(started)[0]["started"], what="w1 to block in its start")
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: {"closed": pid} in lines(closed), timeout=15, what="w1's closer to run")
        exited = wait_for(lambda: (h := _supervised(run, "w1")).get("last_exit") is not None and h, what="w1 to exit")
        assert exited["last_exit"] == 0, exited
        assert "stopped while starting (SIGTERM)" in _log(tmp_path, "w1")
    finally:
        stop_estate(estate)


def test_the_hand_off_round_trips_and_refuses_what_is_malformed():
    import pytest

    keys = LaneKeys.derive(new_secret(), "w1", ["manor", "w1"])
    handoff = Handoff("w1", "/x/beta.yaml", "estate: beta\n", 2, ("manor", "w1"), keys)
    again = Handoff.decode(handoff.encode())
    assert again.layout_text == "estate: beta\n" and again.yards == ("manor", "w1") and again.keys.send == keys.send
    for bad in (b"", b"{", b'{"version": 1}', handoff.encode().replace(b'"version": 1', b'"version": 9')):
        with pytest.raises(ValueError):
            Handoff.decode(bad)
    other = Handoff("manor", "/x/beta.yaml", "", 2, ("manor", "w1"), keys)
    with pytest.raises(ValueError, match="keys"):
        Handoff.decode(other.encode())


def test_a_house_started_by_hand_without_a_hand_off_refuses(tmp_path):
    import subprocess
    import sys

    from tests.house.estates import ROOT

    argv = [sys.executable, "-m", "flowcast.house.worker", str(tmp_path / "beta.yaml"), "--yard", "w1"]
    alone = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, cwd=ROOT, timeout=60)
    assert alone.returncode == 2 and b"no hand-off on stdin" in alone.stderr
    keys = LaneKeys.derive(new_secret(), "manor", ["manor", "w1"])
    other = Handoff("manor", str(tmp_path / "beta.yaml"), "", 2, ("manor", "w1"), keys).encode()
    wrong = subprocess.run(argv, input=other, capture_output=True, cwd=ROOT, timeout=60)
    assert wrong.returncode == 2 and b"not 'w1'" in wrong.stderr


def test_a_start_interrupted_while_wiring_closes_the_lane_it_bound(tmp_path, monkeypatch):
    import pytest

    from flowcast.house import estate
    from tests.house.estates import free_udp_port

    flows = tmp_path / "flows"
    flows.mkdir()
    idle_flow(flows / "idle.flo", "idle")
    (tmp_path / "beta.yaml").write_text(
        f"estate: beta\nroads:\n  main: {{port: {free_udp_port()}}}\n"
        "houses:\n  - {name: manor, flow: flows/idle.flo, manor: true}\n  - {name: w1, flow: flows/idle.flo}\n"
    )
    layout = load_layout(tmp_path / "beta.yaml")

    def interrupted(*args, **kwargs):  # a SIGTERM arriving while the manor opens its road
        raise estate.StartInterrupted(signal.SIGTERM)

    monkeypatch.setattr(estate, "wire_road", interrupted)
    with pytest.raises(estate.StartInterrupted):
        open_house(layout, "manor", houses=2)
    assert not (lane_dir(layout) / "manor").exists(), "the lane socket file was left behind"


def test_a_process_holding_lane_keys_makes_itself_not_dumpable():
    import subprocess
    import sys

    import pytest

    from tests.house.estates import ROOT

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_DUMPABLE is Linux's")
    code = (
        "import ctypes\n"
        "from flowcast.house.handoff import not_dumpable\n"
        "prctl = ctypes.CDLL(None).prctl\n"
        "before = prctl(3, 0, 0, 0, 0)\n"  # PR_GET_DUMPABLE
        "ok = not_dumpable()\n"
        "print(before, ok, prctl(3, 0, 0, 0, 0))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT, timeout=60, text=True)
    assert out.stdout.split() == ["1", "True", "0"], out.stderr


def test_a_house_spins_only_while_each_house_of_its_estate_has_a_core(tmp_path, monkeypatch):
    """flowcast/runtime/spin.py: four houses on two cores must not hold a core each while spinning."""
    import flowcast.runtime.spin as spin_module

    monkeypatch.setattr(spin_module.os, "sched_getaffinity", lambda pid: {0, 1})
    flows = tmp_path / "flows"
    flows.mkdir()
    idle_flow(flows / "idle.flo", "idle")
    for name, workers, budget in (("one", "", spin_module.SPIN), ("four", "  - {name: w, flow: flows/idle.flo, count: 3}\n", 0.0)):
        (tmp_path / f"{name}.yaml").write_text(f"estate: {name}\nhouses:\n  - {{name: manor, flow: flows/idle.flo, manor: true}}\n{workers}")
        house = open_house(load_layout(tmp_path / f"{name}.yaml"), "manor")
        try:
            assert house.scheduler.spin.budget == budget, name
        finally:
            house.close()
