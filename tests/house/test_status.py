"""``flowcast status``: a run dir's supervisor.json and status/*.json, merged and shown.

Run dirs are fabricated in tmp_path; the clock and the pid check are injected
(``collect(now=, alive=)``, or the module's ``_wall``/``_sleep`` through main),
so nothing here waits on real time.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowcast.house import status as st_mod
from flowcast.house.status import collect, main, render, watch

NOW = 1_795_000_000.0
SUP_PID, MANOR_PID, W1_PID, W2_PID = 4242, 4243, 4244, 4245
ALIVE = {SUP_PID, MANOR_PID, W1_PID}


def alive(pid: int) -> bool:
    return pid in ALIVE


def supervisor_doc(**over: Any) -> dict[str, Any]:
    doc = {
        "supervisor_pid": SUP_PID,
        "updated": NOW - 30,
        "state": "running",
        "houses": [
            {"name": "manor", "pid": MANOR_PID, "state": "running", "restarts": 0,
             "started_at": NOW - 3725, "last_exit": None, "next_start": None},
            {"name": "worker1", "pid": W1_PID, "state": "running", "restarts": 2,
             "started_at": NOW - 130, "last_exit": 1, "next_start": None},
            {"name": "worker2", "pid": None, "state": "backoff", "restarts": 5,
             "started_at": NOW - 40, "last_exit": -9, "next_start": NOW + 3.5},
        ],
    }
    doc.update(over)
    return doc


def manor_doc(**over: Any) -> dict[str, Any]:
    doc = {
        "estate": "alpha", "yard": "manor", "manor": True, "house": "ping", "pid": MANOR_PID,
        "started": NOW - 3725, "updated": NOW - 0.4,
        "yards": ["worker1", "worker2"],
        "roads": {"main": {"beta": "alive", "gamma": "dead"}},
        "ports": {"main": ["127.0.0.1", 7530]},
        "counts": {"sent": 10, "delivered": 80, "to_road": 120, "from_road": 83, "from_lane": 120, "denied": 3, "errors_sent": 3},
        "policy": {"allowed": 80, "denied": 3, "replaced": 1},
        "routes": [["out@worker1.alpha/main", "in@.beta/main", 120], ["pong@manor.beta/main", "ping@manor.alpha/main", 80]],
        "denials": [{"at": NOW - 12, "kind": "denied", "src": "x@manor.beta/main", "dst": "secret@manor.alpha/main",
                     "tag": "poke", "reason": "write of 'secret' by 'beta' (estate) on 'main' denied by policy"}],
        "rates": {"sent": 0.0, "delivered": 1.5, "to_road": 2.0, "from_road": 1.5, "to_lane": 0.0, "from_lane": 2.0},
    }
    doc.update(over)
    return doc


def worker_doc(yard: str = "worker1", pid: int = W1_PID, **over: Any) -> dict[str, Any]:
    doc = {
        "estate": "alpha", "yard": yard, "manor": False, "house": "work", "pid": pid,
        "started": NOW - 130, "updated": NOW - 0.7,
        "yards": ["manor", "worker2"] if yard == "worker1" else ["manor", "worker1"],
        "roads": {}, "ports": {},
        "counts": {"sent": 120, "to_lane": 120, "no_share": 4},
        "policy": {},
        "routes": [["out@worker1.alpha/main", "in@.beta/main", 118]],
        "denials": [{"at": NOW - 3, "kind": "no_share", "src": "a@worker1.alpha/main", "dst": "nope@worker1.alpha/main",
                     "tag": "", "reason": "no share 'nope' in yard 'worker1' of 'alpha'"}],
        "rates": {"sent": 2.0, "to_lane": 2.0},
    }
    doc.update(over)
    return doc


def make_run(root: Path, supervisor: Any = None, **statuses: Any) -> Path:
    """root/run with supervisor.json and status/<yard>.json; a str value is written raw."""
    run = root / "run"
    (run / "status").mkdir(parents=True, exist_ok=True)

    def put(path: Path, doc: Any) -> None:
        path.write_bytes(doc if isinstance(doc, bytes) else doc.encode() if isinstance(doc, str) else json.dumps(doc).encode())

    if supervisor is not None:
        put(run / "supervisor.json", supervisor)
    for yard, doc in statuses.items():
        put(run / "status" / f"{yard}.json", doc)
    return run


def estate_run(root: Path) -> Path:
    return make_run(root, supervisor_doc(), manor=manor_doc(), worker1=worker_doc(),
                    worker2=worker_doc("worker2", 9999, updated=NOW - 41, rates={"sent": 7.0}, denials=[], routes=[], counts={"sent": 5}))


def snap(run: Path, **kw: Any) -> dict[str, Any]:
    return collect(run, now=NOW, alive=alive, **kw)


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """main() sees NOW as the time and ALIVE as the live pids; returns the pauses asked for."""
    pauses: list[float] = []
    monkeypatch.setattr(st_mod, "_wall", lambda: NOW)
    monkeypatch.setattr(st_mod, "pid_alive", alive)
    monkeypatch.setattr(st_mod, "_sleep", pauses.append)
    return pauses


# -- the merged snapshot and its rendering ---------------------------------------


def test_full_estate_renders_every_section(tmp_path: Path) -> None:
    text = render(snap(estate_run(tmp_path)))
    lines = text.splitlines()
    assert lines[0].startswith("estate alpha   run ")
    assert "supervisor: pid 4242 alive, running" in lines
    start = lines.index("houses (3; * = manor)")
    table = {line.split()[0]: line for line in lines[start + 2:lines.index("lane: manor, worker1, worker2")]}
    assert lines[start + 1].split() == ["yard", "state", "pid", "restarts", "uptime", "status"]
    # manor first, marked, with its uptime and the age of its last status
    assert table["manor"].split() == ["manor", "*", "running", "4243", "0", "1h02m", "0.4s", "ago"]
    assert table["worker1"].split() == ["worker1", "running", "4244", "2", "2m10s", "0.7s", "ago"]
    # backing off: no pid, restart countdown, last exit by signal, its old status is stale
    assert table["worker2"].split()[:5] == ["worker2", "backoff", "-", "5", "-"]
    assert "STALE (41s ago); restart in 3.5s, last exit signal 9" in table["worker2"]
    assert "lane: manor, worker1, worker2" in lines
    assert "  main: bound 127.0.0.1:7530, by manor" in lines
    assert [line.split() for line in lines if line.startswith("    ")] == [["beta", "alive"], ["gamma", "dead"]]
    # rates per house, and a total of the fresh ones only
    rates = {line.split()[0]: line.split()[1:] for line in lines[lines.index("rates (messages per second)") + 1:] if line.startswith("  ")}
    assert rates["yard"] == ["sent", "delivered", "to_road", "from_road", "to_lane", "from_lane"]
    assert rates["manor"] == ["0", "1.5", "2.0", "1.5", "0", "2.0"]
    assert rates["worker2"][:2] == ["(stale)", "7.0"]
    assert rates["total"] == ["2.0", "1.5", "2.0", "1.5", "2.0", "2.0"]
    assert "  (total of fresh houses only; left out: worker2)" in lines
    # a route seen by two houses counts once (its largest count), listing both
    assert "routes (top 2 of 2, messages)" in lines
    assert any(line.split() == ["120", "out@worker1.alpha/main", "->", "in@.beta/main", "via", "manor,", "worker1"] for line in lines)
    assert "denials 7 (no_share 4, denied 3)" in lines
    assert "policy: allowed 80, denied 3, replaced 1" in lines
    last = lines[lines.index("last 2 denials") + 1:]
    assert "manor denied: x@manor.beta/main -> secret@manor.alpha/main [poke]: write of 'secret'" in last[0]
    assert "worker1 no_share: a@worker1.alpha/main -> nope@worker1.alpha/main: no share 'nope'" in last[1]


def test_snapshot_values(tmp_path: Path) -> None:
    s = snap(estate_run(tmp_path))
    assert s["estate"] == "alpha" and s["supervisor"]["alive"] is True and s["supervisor"]["age"] == 30
    assert [h["yard"] for h in s["houses"]] == ["manor", "worker1", "worker2"]
    assert [h["status"] for h in s["houses"]] == ["ok", "ok", "stale"]
    assert s["rates_from"] == ["manor", "worker1"]
    assert s["rates"]["sent"] == 2.0 and s["counts"]["sent"] == 135
    assert s["roads"]["main"]["remotes"] == {"beta": "alive", "gamma": "dead"}
    assert s["roads"]["main"]["port"] == ["127.0.0.1", 7530]
    assert s["routes"][0] == {"src": "out@worker1.alpha/main", "dst": "in@.beta/main", "messages": 120, "via": ["manor", "worker1"]}
    assert s["denials"]["count"] == 7 and s["denials"]["by_kind"] == {"no_share": 4, "denied": 3}
    assert [d["yard"] for d in s["denials"]["last"]] == ["manor", "worker1"]  # oldest first
    assert s["policy"] == {"allowed": 80, "denied": 3, "replaced": 1}


def test_json_output_is_the_snapshot(tmp_path: Path, frozen: list[float], capsys: pytest.CaptureFixture[str]) -> None:
    run = estate_run(tmp_path)
    assert main([str(run), "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == json.loads(json.dumps(snap(run)))
    assert frozen == []  # one snapshot, no refresh


def test_stale_after_three_periods(tmp_path: Path) -> None:
    run = make_run(tmp_path, None, manor=manor_doc(updated=NOW - 2.9), worker1=worker_doc(updated=NOW - 3.1))
    houses = {h["yard"]: h for h in snap(run)["houses"]}
    assert houses["manor"]["status"] == "ok" and houses["worker1"]["status"] == "stale"
    assert houses["worker1"]["age"] == pytest.approx(3.1)
    # the period is a parameter: with a 2 s period 3.1 s is still fresh
    assert all(h["status"] == "ok" for h in snap(run, period=2.0)["houses"])
    assert "STALE (3.1s ago)" in render(snap(run))


def test_status_of_an_earlier_process_is_stale(tmp_path: Path) -> None:
    """The supervisor restarted the house; the file is still the old process's."""
    run = make_run(tmp_path, supervisor_doc(), worker1=worker_doc(pid=1111, updated=NOW - 0.2))
    (w1,) = [h for h in snap(run)["houses"] if h["yard"] == "worker1"]
    assert w1["status"] == "stale" and w1["note"] == "written by earlier pid 1111"
    assert "written by earlier pid 1111" in render(snap(run))


def test_dead_supervisor_and_houses(tmp_path: Path) -> None:
    run = make_run(tmp_path, supervisor_doc(supervisor_pid=77), manor=manor_doc())
    ALIVE_NOW = {W1_PID}
    s = collect(run, now=NOW, alive=lambda pid: pid in ALIVE_NOW)
    text = render(s)
    assert "supervisor: pid 77 NOT RUNNING (last state running, written 30s ago)" in text
    manor = s["houses"][0]
    assert manor["alive"] is False and manor["uptime"] is None
    assert "gone (running)" in text


def test_stopped_estate(tmp_path: Path) -> None:
    houses = [dict(h, pid=None, state="stopped", last_exit=0, next_start=None) for h in supervisor_doc()["houses"]]
    run = make_run(tmp_path, supervisor_doc(state="stopped", houses=houses))
    text = render(collect(run, now=NOW, alive=lambda pid: False))
    assert "supervisor: pid 4242 exited, stopped" in text
    assert "last exit 0" in text and "no status yet" in text


# -- robustness ---------------------------------------------------------------------


def test_empty_run_dir(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    s = snap(run)
    assert s["supervisor"]["status"] == "no status yet" and s["houses"] == [] and s["estate"] is None
    text = render(s)
    assert "supervisor: no status yet" in text and "houses: none have reported yet" in text
    assert "roads: none" in text and "routes: none yet" in text and "denials 0" in text


def test_supervised_house_without_status_file(tmp_path: Path) -> None:
    run = make_run(tmp_path, supervisor_doc(), manor=manor_doc())
    houses = {h["yard"]: h for h in snap(run)["houses"]}
    assert houses["worker1"]["status"] == "no status yet"
    assert houses["worker1"]["uptime"] == 130  # from the supervisor, the process is alive


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"estate": "alp', "unreadable: not JSON (Unterminated string"),
        ("", "unreadable: empty file"),
        ("[1, 2]", "unreadable: a JSON list, not an object"),
        ("null", "unreadable: a JSON NoneType, not an object"),
        (b"\xff\xfe{}", "unreadable: not UTF-8"),
        ("[" * 100_000, "unreadable: not JSON"),
    ],
)
def test_corrupt_status_file(tmp_path: Path, content: Any, problem: str) -> None:
    run = make_run(tmp_path, supervisor_doc(), manor=manor_doc(), worker1=content)
    s = snap(run)
    houses = {h["yard"]: h for h in s["houses"]}
    assert houses["worker1"]["status"].startswith(problem)
    assert houses["manor"]["status"] == "ok"
    text = render(s)
    assert "worker1" in text and problem in text
    json.dumps(s)


def test_corrupt_supervisor_file_and_status_dir_entries(tmp_path: Path) -> None:
    run = make_run(tmp_path, "{not json", manor=manor_doc())
    (run / "status" / "odd.json").mkdir()  # a directory where a file should be
    os.mkfifo(run / "status" / "pipe.json")  # would block an ordinary open()
    (run / "status" / ".manor.json.x8k2").write_text("{")  # an atomic write in progress
    (run / "status" / "notes.txt").write_text("hi")
    s = snap(run)
    assert s["supervisor"]["status"].startswith("unreadable: not JSON")
    assert {h["yard"]: h["status"] for h in s["houses"]} == {"manor": "ok", "odd": "unreadable: not a regular file", "pipe": "unreadable: not a regular file"}
    assert "supervisor: unreadable: not JSON" in render(s)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A status file the reader may not open (faked: CI runs as root, which reads anything)."""
    import flowcast.house.status as status_module

    run = make_run(tmp_path, supervisor_doc(), manor=manor_doc())
    path = run / "status" / "manor.json"
    real_open = os.open

    def refusing_open(target, flags, *args):
        if Path(target) == path:
            raise PermissionError(13, "Permission denied", str(target))
        return real_open(target, flags, *args)

    monkeypatch.setattr(status_module.os, "open", refusing_open)
    s = snap(run)
    assert s["houses"][0]["status"] == "unreadable: Permission denied"


def test_wrong_types_everywhere(tmp_path: Path) -> None:
    """Valid JSON of the wrong shape in every field: shown as far as it makes sense."""
    bad = {key: value for key, value in zip(manor_doc(), [1, [], {"x": 1}, "yes", None, 2.5, "x", True, [1], 7] * 10)}
    bad.update(updated="soon", pid=True, counts={"sent": "many", "to_road": float("nan"), "delivered": 3},
               routes=[["a", "b"], [1, 2, 3], ["a", "b", "3"], "junk", ["s@y.e", "d@y.e", 4]],
               denials=[None, {"kind": 5}, {"kind": "denied", "at": "then", "reason": ["x"]}])
    sup = {"supervisor_pid": "4242", "state": 3, "houses": [None, {"name": 5}, {"name": "manor", "pid": 2**80, "restarts": "1"}]}
    run = make_run(tmp_path, sup, manor=bad, other={"updated": NOW, "roads": {"main": ["beta"]}, "ports": {"main": "x:1"}})
    s = collect(run, now=NOW)  # the real pid check, with an absurd pid
    text = render(s)
    json.dumps(s, allow_nan=False)
    (manor,) = [h for h in s["houses"] if h["yard"] == "manor"]
    assert manor["status"] == "stale" and manor["note"] == "no update time"
    assert manor["counts"] == {"delivered": 3} and manor["alive"] is False
    assert s["routes"] == [{"src": "s@y.e", "dst": "d@y.e", "messages": 4, "via": ["manor"]}]
    assert s["denials"]["last"][0]["kind"] == "denied"
    assert "main: port unknown, by other" in text


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
FIELDS = ["estate", "yard", "manor", "house", "pid", "started", "updated", "yards", "roads", "ports",
          "counts", "policy", "routes", "denials", "rates"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.dictionaries(st.sampled_from(FIELDS), JSON), sup=st.dictionaries(st.sampled_from(["supervisor_pid", "state", "updated", "houses"]), JSON),
       house=st.dictionaries(st.sampled_from(["name", "pid", "state", "restarts", "started_at", "last_exit", "next_start"]), JSON))
def test_any_json_never_raises(tmp_path: Path, doc: dict, sup: dict, house: dict) -> None:
    sup = dict(sup, houses=[dict(house, name="manor"), *(sup.get("houses") if isinstance(sup.get("houses"), list) else [])])
    run = make_run(tmp_path, json.dumps(sup), manor=json.dumps(doc))
    s = collect(run, now=NOW, alive=alive)
    render(s)
    json.dumps(s, allow_nan=False)


def test_control_characters_are_not_sent_to_the_terminal(tmp_path: Path) -> None:
    denial = {"at": NOW, "kind": "denied", "src": "a\x1b[2Jb", "dst": "d", "tag": "", "reason": "evil\x1b]0;title\x07\nnext"}
    run = make_run(tmp_path, None, manor=manor_doc(denials=[denial], estate="al\x1bpha"))
    text = render(snap(run))
    assert "\x1b" not in text and "\x07" not in text
    assert "a\\x1b[2Jb" in text and "evil\\x1b]0;title\\x07\\nnext" in text


def test_real_router_status(tmp_path: Path) -> None:
    """What Router.status() really holds, written as the house's status writer does, reads back."""
    from tests.routing.kit import World

    world = World(seed=3)
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=[{"allow": "write", "estate": "beta"}])
    beta = world.routed_estate("beta", ["manor", "w1"], policy=[{"allow": "write", "estate": "alpha", "share": "public.*"}])
    world.connect(alpha, beta)
    beta.store("manor").share("secret")
    alpha.store("w1").queue("out")
    out = alpha.store("w1").queue("out.error")  # where the denial comes back
    alpha["w1"].send("secret@.beta", {"x": 1}, src="out", tag="poke")
    assert world.run_until(lambda: len(out.queue) == 1, 5)
    statuses = {}
    for yard, router in beta.houses.items():
        doc = router.status()
        doc["rates"] = {key: 0.0 for key in doc["counts"]}
        doc.update(pid=MANOR_PID if yard == "manor" else W1_PID, house="h", started=NOW - 5, updated=NOW - 0.5,
                   manor=yard == "manor", yard=yard, ports={"main": ["127.0.0.1", 7531]})
        statuses[yard] = json.loads(json.dumps(doc, default=str))
    s = snap(make_run(tmp_path, None, **statuses))
    assert s["estate"] == "beta" and s["yards"] == ["manor", "w1"]
    assert s["roads"]["main"]["remotes"]["alpha"] in ("allowed", "alive")
    assert s["denials"]["count"] == 1 and s["denials"]["by_kind"] == {"denied": 1}
    assert s["policy"]["denied"] == 1
    assert s["denials"]["last"][0]["src"] == "out@w1.alpha/main"
    assert "manor denied: out@w1.alpha/main -> secret@.beta/main [poke]" in render(s)


def test_status_period_is_the_estates() -> None:
    from flowcast.house.estate import STATUS_PERIOD

    assert st_mod.STATUS_PERIOD == STATUS_PERIOD


# -- the command -------------------------------------------------------------------


def test_missing_run_dir_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"flowcast status: no such run directory: {tmp_path / 'nope'}\n"
    assert main([str(tmp_path / "nope.yaml"), "--once"]) == 2
    assert "no such layout file" in capsys.readouterr().err


def test_bad_arguments_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = estate_run(tmp_path)
    assert main([str(run), "--interval", "0"]) == 2
    assert main([str(run), "--interval", "nan"]) == 2
    assert main([str(run), "--count", "0"]) == 2
    not_a_layout = tmp_path / "x.yaml"
    not_a_layout.write_text("estate: [\n")
    assert main([str(not_a_layout)]) == 2
    assert "is not a usable estate layout (give its run directory instead)" in capsys.readouterr().err


def write_layout(tmp_path: Path, run: str = "run") -> Path:
    (tmp_path / "flows").mkdir(exist_ok=True)
    (tmp_path / "flows" / "ping.flo").write_text("house ping\n")
    (tmp_path / "houses").mkdir(exist_ok=True)
    layout = tmp_path / "houses" / "alpha.yaml"
    layout.write_text(
        f"estate: alpha\nrun: ../{run}\nroads:\n  main:\n    port: 7530\n    remotes:\n      - {{estate: beta, port: 7531}}\n"
        "  side:\n    port: 0\nhouses:\n  - name: manor\n    flow: ../flows/ping.flo\n"
    )
    return layout


def test_layout_argument(tmp_path: Path, frozen: list[float], capsys: pytest.CaptureFixture[str]) -> None:
    layout = write_layout(tmp_path)
    make_run(tmp_path, supervisor_doc(houses=supervisor_doc()["houses"][:1]),
             manor=manor_doc(roads={"main": {"beta": "joined"}}))
    assert main([str(layout), "--once"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"estate alpha   run {(tmp_path / 'run').resolve()}")
    assert "  main: bound 127.0.0.1:7530, by manor" in lines
    assert "  side: configured 127.0.0.1:0, not reported" in lines
    assert [line.split() for line in lines if line.startswith("    ")] == [["beta", "joined"], ["no", "remote", "estates"]]


def test_layout_without_run_dir_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layout = write_layout(tmp_path, run="never")
    assert main([str(layout)]) == 2
    err = capsys.readouterr().err
    assert f"estate alpha has no run directory {(tmp_path / 'never').resolve()}" in err and "flowcast run" in err


def test_count_two_gives_two_blocks(tmp_path: Path, frozen: list[float], capsys: pytest.CaptureFixture[str]) -> None:
    run = estate_run(tmp_path)
    assert main([str(run), "--count", "2", "--interval", "0.25"]) == 0
    out = capsys.readouterr().out
    one = render(snap(run))
    assert out == one + "\n" + one
    assert frozen == [0.25]  # one pause, between the two refreshes
    assert "\x1b" not in out


def test_once_is_one_block(tmp_path: Path, frozen: list[float], capsys: pytest.CaptureFixture[str]) -> None:
    run = estate_run(tmp_path)
    assert main([str(run), "--once", "--count", "5"]) == 0
    assert capsys.readouterr().out == render(snap(run)) and frozen == []


def test_refreshes_show_changes(tmp_path: Path) -> None:
    run = make_run(tmp_path, supervisor_doc())
    states = iter([NOW, NOW + 1])
    out = io.StringIO()

    def pause(seconds: float) -> None:  # the estate moves on between refreshes
        make_run(tmp_path, None, manor=manor_doc(updated=NOW + 0.5))

    watch(lambda: collect(run, now=next(states), alive=alive), interval=1, count=2, out=out, tty=False, sleep=pause)
    first, second = out.getvalue().split("\n\nestate ")
    row = next(line for line in first.splitlines() if line.startswith("  manor "))
    assert row.split() == ["manor", "running", "4243", "0", "1h02m", "no", "status", "yet"]
    row = next(line for line in second.splitlines() if line.startswith("  manor "))
    assert row.split() == ["manor", "*", "running", "4243", "0", "1h02m", "0.5s", "ago"]


def test_tty_redraws_in_place(tmp_path: Path) -> None:
    run = estate_run(tmp_path)
    out = io.StringIO()
    pauses: list[float] = []
    watch(lambda: snap(run), interval=2, count=3, out=out, tty=True, sleep=pauses.append)
    screens = out.getvalue().split("\x1b[H")
    assert screens[0] == "" and len(screens) == 4 and pauses == [2, 2]
    for screen in screens[1:]:
        assert screen.endswith("\x1b[K\n\x1b[J")
        assert screen.replace("\x1b[K", "").removesuffix("\x1b[J") == render(snap(run))


def test_interrupt_exits_cleanly(tmp_path: Path, frozen: list[float], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(st_mod, "_sleep", interrupt)
    assert main([str(estate_run(tmp_path))]) == 0  # live until ^C
    captured = capsys.readouterr()
    assert captured.out.startswith("estate alpha") and captured.err == ""


def test_through_the_flowcast_command(tmp_path: Path, frozen: list[float], capsys: pytest.CaptureFixture[str]) -> None:
    from flowcast.cli.main import main as flowcast

    run = estate_run(tmp_path)
    assert flowcast(["status", str(run), "--once"]) == 0
    assert capsys.readouterr().out == render(snap(run))
    assert flowcast(["status", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["estate"] == "alpha"
    assert flowcast(["status", str(tmp_path / "gone")]) == 2
    assert flowcast(["--help"]) == 0
    assert "  status    show a running estate" in capsys.readouterr().out


def test_real_process_end_to_end(tmp_path: Path) -> None:
    """The module as a program, on real time and real pids: this process plays the supervisor."""
    import subprocess

    run = make_run(tmp_path, supervisor_doc(supervisor_pid=os.getpid()))
    done = subprocess.run([sys.executable, "-m", "flowcast.house.status", str(run), "--once"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    assert f"supervisor: pid {os.getpid()} alive, running" in done.stdout


def test_refused_joins_are_shown_per_road(tmp_path: Path) -> None:
    """A join refused because its name is bound to another key shows under its road (issue 10.2)."""
    joins = {"main": {"join_refused": 3, "key_changed": 2, "join_cookies": 40, "bogus": "x"}}
    run = make_run(tmp_path, supervisor_doc(), manor=manor_doc(joins=joins), worker1=worker_doc())
    s = snap(run)
    assert s["roads"]["main"]["joins"] == {"join_refused": 3, "key_changed": 2, "join_cookies": 40}
    assert "    joins: join cookies 40, join refused 3, key changed 2" in render(s).splitlines()
    # a house that reports no joins shows no line
    assert not any("joins:" in line for line in render(snap(estate_run(tmp_path / "other"))).splitlines())


def test_errors_that_came_back_are_shown_at_the_sender(tmp_path: Path) -> None:
    """Issue 14, item 5: the receiver counted the denial; the sender said 'denials 0' and nothing else."""
    counts = {"sent": 3, "errors_back": 3, "errors_back_denied": 2, "errors_back_no_share": 1}
    run = make_run(tmp_path, supervisor_doc(), manor=manor_doc(counts=counts, denials=[]),
                   worker1=worker_doc(), worker2=worker_doc("worker2", 9999, counts={"errors_back": 1, "errors_back_denied": 1}))
    s = snap(run)
    assert s["errors_back"] == {"count": 4, "by_kind": {"denied": 3, "no_share": 1}}
    assert "errors back 4 (denied 3, no_share 1)" in render(s)
    quiet = snap(estate_run(tmp_path / "quiet"))
    assert quiet["errors_back"]["count"] == 0 and "errors back" not in render(quiet)


def test_a_remote_that_never_joins_shows_the_address_tried_and_the_last_answer(tmp_path: Path) -> None:
    """Issue 14, item 4: "no presence yet" alone left the operator to read the manor's log."""
    joining = {"main": {
        "gamma": {"address": "10.0.0.9:7531", "tries": 7, "answer": "timeout", "reason": "", "at": NOW - 4, "retry_in": 30.0},
        "delta": {"address": "10.0.0.8:7531", "tries": 1, "answer": "refused", "reason": "key changed", "at": NOW - 2},
        "beta": {"address": "127.0.0.1:7531", "tries": 1, "answer": "accepted", "reason": "", "at": NOW - 3000},
        "epsilon": "junk",
    }}
    run = make_run(tmp_path, supervisor_doc(), manor=manor_doc(joining=joining), worker1=worker_doc())
    text = render(snap(run))
    assert "gamma    dead; trying 10.0.0.9:7531, 7 tries; last: no answer (nothing there, a firewall, or the estate is down), 4 s ago" in text
    assert "delta    not joined; trying 10.0.0.8:7531, 1 try; last: refused (key changed), 2 s ago" in text
    assert "    beta     alive\n" in text  # joined: its presence alone
    assert "    epsilon  no presence yet\n" in text  # a garbled entry is left out, never a crash
