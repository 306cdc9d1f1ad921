"""SIGTERM of an estate: what is in flight is delivered, or reported -- never silently gone.

Two estates on loopback.  alpha's worker ``app`` pours a steady numbered
stream to ``inbox@manor.beta``: down alpha's lane to its manor, over the
road to beta, whose manor writes every landed message to a file.  The
worker writes every number it sent, and every error report that comes
back to its ``pour.out.error`` share (a watcher: it runs while the house
drains).  After alpha stops, every number sent is in beta's file or is
counted by a report: an error in the worker's share, or the ``stop``
section alpha's houses leave in their status files (docs/routing.md,
"Stopping").
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from tests.house.estates import free_udp_port, idle_flow, lines, start_estate, status, stop_estate, wait_for, write_flow

PER_TICK = 100


def _estates(tmp_path: Path, drain: str = "") -> dict[str, Path]:
    a_port, b_port = free_udp_port(), free_udp_port()
    flows = tmp_path / "flows"
    flows.mkdir()
    files = {name: tmp_path / f"{name}.jsonl" for name in ("sent", "errors", "landed")}
    idle_flow(flows / "idle.flo", "idle")
    write_flow(flows / "app.flo", "app",
               "framer pour be active first go\n  frame go\n"
               f"    do routeplay pour with dst \"inbox@manor.beta\" per_tick {PER_TICK} "
               f"sent \"{files['sent']}\" errors \"{files['errors']}\"\n")
    write_flow(flows / "sink.flo", "sink",
               f"framer keep be active first listen\n  frame listen\n    do routeplay record from inbox with out \"{files['landed']}\"\n")
    (tmp_path / "alpha.yaml").write_text(f"""
estate: alpha
period: 0.01
{drain}
roads:
  main:
    port: {a_port}
    acceptance: always
    remotes: [{{estate: beta, host: 127.0.0.1, port: {b_port}}}]
houses:
  - {{name: manor, flow: flows/idle.flo, manor: true}}
  - {{name: app, flow: flows/app.flo}}
""")
    (tmp_path / "beta.yaml").write_text(f"""
estate: beta
roads:
  main: {{port: {b_port}, acceptance: always}}
policy:
  - {{allow: write, estate: alpha, share: inbox}}
houses:
  - {{name: manor, flow: flows/sink.flo, manor: true}}
""")
    return files


def _sent(path: Path) -> set[int]:
    return {n for line in lines(path) for n in range(*line["ns"])}


def _reported(run: Path, errors: Path) -> int:
    """Messages alpha's reports account for: error reports to the worker, and each house's stop section."""
    told = sum(int(e["error"].get("count", 1)) for e in lines(errors))
    stops = [status(run, yard).get("stop") or {} for yard in ("app", "manor")]
    return told + sum(s.get("undelivered", 0) + sum(s.get("unconsumed", {}).values()) for s in stops)


def _supervised_pid(run: Path, name: str) -> int | None:
    try:
        houses = json.loads((run / "supervisor.json").read_text())["houses"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return None
    return next((h.get("pid") for h in houses if h["name"] == name and h.get("state") in ("starting", "running")), None)


def test_sigterm_mid_stream_delivers_or_reports_every_message(tmp_path):
    files = _estates(tmp_path)
    beta = start_estate(tmp_path / "beta.yaml", houses=1)
    alpha = start_estate(tmp_path / "alpha.yaml", houses=2)
    try:
        wait_for(lambda: len(lines(files["landed"])) >= 3000, timeout=60, what="the stream to be flowing")
        a_code, a_out = stop_estate(alpha)
    finally:
        if alpha.poll() is None:
            stop_estate(alpha)
        b_code, b_out = stop_estate(beta)
    run = tmp_path / "run" / "alpha"
    sent = _sent(files["sent"])
    landed = {m["data"]["n"] for m in lines(files["landed"])}
    missing = sent - landed
    assert len(sent) >= 3000 and max(sent) + 1 == len(sent)  # the stream was steady and whole up to the stop
    assert len(missing) <= _reported(run, files["errors"]), \
        f"{len(missing)} sent messages neither landed nor reported (first: {sorted(missing)[:10]})"
    for yard in ("app", "manor"):  # each house drained, and said so in its status
        stop = status(run, yard).get("stop")
        assert stop is not None, f"house {yard} left no stop section in its status"
        assert stop["by"] == "SIGTERM"
        assert stop["drained"], f"house {yard} did not drain with a live peer: {stop}"
    assert not missing, "a live peer got everything: the drain delivered what was in flight"
    assert a_code == 0, a_out
    assert b_code == 0, b_out


def test_sigterm_of_an_estate_whose_manor_takes_a_stream_on_its_ticks_loses_nothing_silently(tmp_path):
    """The case of issue 24: a worker routes entries to its manor, whose flow takes them on its ticks
    (as ``causal publish`` does; here every 0.5 s, so entries wait in the share for it); SIGTERM of the
    estate mid-stream used to lose what waited, and what the lane still carried, with no word."""
    flows = tmp_path / "flows"
    flows.mkdir()
    sent, errors, taken = (tmp_path / f"{name}.jsonl" for name in ("sent", "errors", "taken"))
    write_flow(flows / "app.flo", "app",
               "framer pour be active first go\n  frame go\n"
               f"    do routeplay pour with dst \"outbox@manor\" per_tick {PER_TICK} sent \"{sent}\" errors \"{errors}\"\n")
    write_flow(flows / "keeper.flo", "keeper",
               f"framer keep be active at 0.5 first take\n  frame take\n    do routeplay take from outbox with out \"{taken}\"\n")
    (tmp_path / "alpha.yaml").write_text("""
estate: alpha
period: 0.05
houses:
  - {name: manor, flow: flows/keeper.flo, manor: true}
  - {name: app, flow: flows/app.flo}
""")
    run = tmp_path / "run" / "alpha"
    alpha = start_estate(tmp_path / "alpha.yaml", houses=2)
    try:
        wait_for(lambda: lines(taken), timeout=60, what="the stream to be flowing")
        # The stop comes on a worker's tick (it writes what it sent each tick), whenever the manor's flow last took.
        wait_for(lambda: len(_sent(sent)) >= 3000, timeout=60, what="3000 entries sent")
    finally:
        code, out = stop_estate(alpha)
    assert code == 0, out
    all_sent = _sent(sent)
    got = [n for t in lines(taken) for n in t["ns"]]
    missing = all_sent - set(got)
    assert len(all_sent) >= 3000 and len(got) == len(set(got))
    assert len(missing) <= _reported(run, errors), \
        f"{len(missing)} of {len(all_sent)} sent neither taken nor reported (first: {sorted(missing)[:10]})"
    # The worker stopped first and drained into the live manor: nothing failed on the way, and
    # what is missing is exactly what the manor's flow had not taken yet -- counted, in its status.
    assert status(run, "app")["stop"]["drained"] and not lines(errors)
    manor = status(run, "manor")["stop"]
    assert manor["undelivered"] == 0 and manor["unconsumed"].get("outbox", 0) == len(missing), manor


def test_stop_with_nothing_in_flight_does_not_wait_the_drain_time(tmp_path):
    flows = tmp_path / "flows"
    flows.mkdir()
    idle_flow(flows / "idle.flo", "idle")
    (tmp_path / "alpha.yaml").write_text("""
estate: alpha
drain: 30
houses:
  - {name: manor, flow: flows/idle.flo, manor: true}
  - {name: worker, flow: flows/idle.flo}
""")
    run = tmp_path / "run" / "alpha"
    alpha = start_estate(tmp_path / "alpha.yaml", houses=2)
    try:
        wait_for(lambda: status(run, "manor").get("pid") and status(run, "worker").get("pid"), what="both houses running")
    finally:
        began = time.monotonic()
        code, out = stop_estate(alpha, timeout=40)
        took = time.monotonic() - began
    assert code == 0, out
    assert took < 10, f"an idle estate took {took:.1f} s to stop with drain: 30"
    for yard in ("manor", "worker"):
        stop = status(run, yard)["stop"]
        assert stop["drained"] and stop["in_flight"] == {} and stop["undelivered"] == 0, stop
        assert stop["took"] < 1.0, stop


def test_a_peer_that_never_acknowledges_costs_the_drain_time_and_is_reported(tmp_path):
    files = _estates(tmp_path, drain="drain: 2")
    beta = start_estate(tmp_path / "beta.yaml", houses=1)
    alpha = start_estate(tmp_path / "alpha.yaml", houses=2)
    b_run, run = tmp_path / "run" / "beta", tmp_path / "run" / "alpha"
    frozen = None
    try:
        wait_for(lambda: len(lines(files["landed"])) >= 1000, timeout=60, what="the stream to be flowing")
        frozen = wait_for(lambda: _supervised_pid(b_run, "manor"), what="beta's manor pid")
        os.kill(frozen, signal.SIGSTOP)  # beta hears nothing and acknowledges nothing from now on
        seen = len(lines(files["landed"]))
        wait_for(lambda: _sent(files["sent"]) and max(_sent(files["sent"])) >= seen + 5 * PER_TICK,
                 what="alpha to send on into the silence")
        began = time.monotonic()
        a_code, a_out = stop_estate(alpha, timeout=30)
        took = time.monotonic() - began
        # what beta had landed while alpha stopped (thawed, it lands what waits in its socket: those are reported too)
        landed = {m["data"]["n"] for m in lines(files["landed"])}
    finally:
        if frozen is not None:
            os.kill(frozen, signal.SIGCONT)
        if alpha.poll() is None:
            stop_estate(alpha)
        stop_estate(beta)
    assert a_code == 0, a_out
    assert 2.0 <= took < 2.0 + 8, f"the stop took {took:.1f} s with a drain of 2 s"
    stop = status(run, "manor")["stop"]
    assert not stop["drained"] and stop["left"].get("road main", 0) > 0, stop
    assert stop["undelivered"] > 0 and stop["routes"][0]["src"] == "pour.out@app.alpha/main", stop
    assert stop["routes"][0]["dst"] == "inbox@manor.beta/main", stop
    log = (run / "logs" / "manor.log").read_text()
    assert "not delivered, reported here" in log and "drain of 2 s ran out" in log
    sent = _sent(files["sent"])
    missing = sent - landed
    assert missing, "beta was frozen: something must have been left undelivered"
    assert len(missing) <= _reported(run, files["errors"])
