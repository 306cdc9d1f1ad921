"""docs/first-estate-app.md, tested: its files are examples/first-estate/, and its commands run them.

The doc's convention, checked here: every file of the example is shown whole
in a fenced block whose info string is ``LANGUAGE title=examples/first-estate/NAME``
(```` ```yaml title=examples/first-estate/plant.yaml ````).  Each such block
must be byte for byte the file, and every file of the folder must be shown,
except the folder's ``.gitignore`` and what a run makes (``run/``, ``keeps/``).

The run copies the folder to a temporary directory as ``examples/first-estate``
and runs the doc's commands there, as a user would from a checkout (the
doc's ``.venv/bin/flowcast`` is this interpreter's ``-m flowcast.cli.main``),
with three changes to the copy: the two UDP ports become free ones (loopback
only), and the sensor stops after :data:`READINGS` readings instead of 120,
to keep the test short.  ``run/`` and ``keeps/`` are relative to the
layouts, so the copy's stay in the temporary directory.

:func:`run_first_estate` is also the run tests/spark/test_first_estate_report.py
analyses.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.house.estates import ROOT, free_udp_port, stop_estate, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="estates run on Linux")

EXAMPLE = ROOT / "examples" / "first-estate"
DOC = ROOT / "docs" / "first-estate-app.md"
#: The folder's files that are not the app: git's ignore list, and what a run makes.
NOT_SHOWN = {".gitignore"}
MADE_BY_A_RUN = {"run", "keeps", "__pycache__"}

#: The doc's commands, exactly as it gives them; each must appear in it verbatim.
CHECK_PLANT = ".venv/bin/flowcast check examples/first-estate/plant.flo"
CHECK_CONTROL = ".venv/bin/flowcast check examples/first-estate/thermostat.yaml"
RUN_PLANT = ".venv/bin/flowcast run examples/first-estate/plant.yaml"
RUN_CONTROL = ".venv/bin/flowcast run examples/first-estate/control.yaml"
STATUS_PLANT = ".venv/bin/flowcast status examples/first-estate/plant.yaml --json"
STATUS_CONTROL = ".venv/bin/flowcast status examples/first-estate/control.yaml --once"
EXPORT = ".venv/bin/flowcast export examples/first-estate/run/events --out examples/first-estate/run/collected"
#: Run by tests/spark/test_first_estate_report.py through the session's Spark (fcspark.run_jobs), the same jobs.
SPARK = ".venv/bin/flowcast spark all --input examples/first-estate/run/collected --output examples/first-estate/run/report"
COMMANDS = (CHECK_PLANT, CHECK_CONTROL, RUN_PLANT, RUN_CONTROL, STATUS_PLANT, STATUS_CONTROL, EXPORT, SPARK)
#: The same status commands for the other estate.
STATUS_CONTROL_JSON = ".venv/bin/flowcast status examples/first-estate/control.yaml --json"
STATUS_PLANT_ONCE = ".venv/bin/flowcast status examples/first-estate/plant.yaml --once"

#: Readings the sensor takes in the test (the doc's flow says 120: 30 s).
READINGS = 24
PORTS = {"plant": 7590, "control": 7591}

# What the flows print (house logs), as the doc quotes them.
ALARM = "ALARM: temperature 25.0 or more, fan on"
NORMAL = "normal: fan off"
SWITCHED_ON = "relay: fan switched: fan.state value='on'"
SWITCHED = "relay: fan switched: "
ACKED_ON = "control: plant acknowledged: fan.ack value='on'"
ACKED = "control: plant acknowledged: "
SENSOR_DONE = "sensor: last reading sent"


# -- the doc and the folder ----------------------------------------------------------


def doc_blocks(text: str) -> dict[str, str]:
    """``{path: content}`` of every fenced block whose info string has ``title=PATH``."""
    blocks: dict[str, str] = {}
    for match in re.finditer(r"^```[^\s`]*[ \t]+title=(\S+)[ \t]*\n(.*?)^```[ \t]*$", text, re.M | re.S):
        path, body = match.group(1), match.group(2)
        assert path not in blocks, f"{path} is shown twice in {DOC.name}"
        blocks[path] = body
    return blocks


def example_files() -> dict[str, Path]:
    """The example's own files, as ``examples/first-estate/NAME`` -> path."""
    files = {}
    for path in sorted(EXAMPLE.rglob("*")):
        rel = path.relative_to(EXAMPLE)
        if rel.parts[0] in MADE_BY_A_RUN or str(rel) in NOT_SHOWN or not path.is_file():
            continue
        files[f"examples/first-estate/{rel.as_posix()}"] = path
    return files


def test_every_file_of_the_example_is_in_the_doc_as_it_is() -> None:
    blocks = doc_blocks(DOC.read_text(encoding="utf-8"))
    files = example_files()
    assert set(files) == {f"examples/first-estate/{n}" for n in ("sensor.py", "plant.flo", "thermostat.yaml", "plant.yaml", "control.yaml")}
    assert set(blocks) == set(files), f"shown but no such file: {set(blocks) - set(files)}; not shown: {set(files) - set(blocks)}"
    for name, path in files.items():
        assert blocks[name].encode("utf-8") == path.read_bytes(), f"{DOC.name}'s {name} differs from {path}"


def test_the_doc_gives_the_commands_the_test_runs() -> None:
    text = DOC.read_text(encoding="utf-8")
    for command in COMMANDS:
        assert command in text, command
    # and what the flows print, which the doc tells the reader to look for
    for said in (ALARM, SWITCHED_ON, ACKED_ON, SENSOR_DONE):
        assert said in text, said
    assert (EXAMPLE / ".gitignore").read_text() == "run/\nkeeps/\n"


# -- the run ---------------------------------------------------------------------------


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == ".venv/bin/flowcast", command
    return [sys.executable, "-m", "flowcast.cli.main", *words[1:]]


def _run(command: str, cwd: Path, timeout: float = 60.0) -> str:
    done = subprocess.run(_argv(command), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout


def _start(command: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(_argv(command), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(estates: dict[str, subprocess.Popen]) -> dict[str, tuple[int, str]]:
    """SIGTERM each estate in turn (bounded: killed and an AssertionError after 15 s); every one is stopped."""
    stopped, failed = {}, []
    for name, proc in estates.items():
        try:
            stopped[name] = stop_estate(proc, timeout=15.0)
        except AssertionError as error:
            failed.append(f"{name}: {error}")
    assert not failed, failed
    return stopped


def _replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


def copy_example(tmp: Path) -> Path:
    """The example under ``tmp/examples/first-estate`` with free ports and the short run; returns its folder."""
    folder = tmp / "examples" / "first-estate"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns(*MADE_BY_A_RUN))
    plant_port = free_udp_port()
    control_port = free_udp_port()
    while control_port == plant_port:
        control_port = free_udp_port()
    _replace_once(folder / "plant.yaml", f"port: {PORTS['plant']}", f"port: {plant_port}")
    _replace_once(folder / "control.yaml", f"port: {PORTS['control']}", f"port: {control_port}")
    _replace_once(folder / "control.yaml", f"host: 127.0.0.1, port: {PORTS['plant']}", f"host: 127.0.0.1, port: {plant_port}")
    _replace_once(folder / "plant.flo", "repeat 120", f"repeat {READINGS}")
    for layout in ("plant.yaml", "control.yaml"):
        text = (folder / layout).read_text()
        assert "7590" not in text and "7591" not in text and "host: 0" not in text, text
    return folder


def _log(folder: Path, estate: str, yard: str) -> str:
    try:
        return (folder / "run" / estate / "logs" / f"{yard}.log").read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _said(log: str, *starts: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith(starts)]


def _status(command: str, cwd: Path) -> dict:
    return json.loads(_run(command, cwd, timeout=20.0))


def _routes(snapshot: dict) -> dict[str, int]:
    return {f"{r['src']} -> {r['dst']}": r["messages"] for r in snapshot["routes"]}


READING = "temperature@sensor.plant/main -> temperature@.control/main"
COMMAND = "fan.command@manor.control/main -> fan.command@relay.plant/main"
ACK = "fan.ack@relay.plant/main -> fan.ack@.control/main"
FAN = "fan.state@relay.plant/main -> fan.state@sensor.plant/main"


def run_first_estate(tmp: Path) -> Path:
    """The walkthrough's run, checked on the way: returns the folder ``flowcast export --out`` collected into."""
    folder = copy_example(tmp)
    for command, flow in ((CHECK_PLANT, "plant.flo"), (CHECK_CONTROL, "thermostat.yaml")):
        assert f"examples/first-estate/{flow}: ok" in _run(command, tmp)

    plant = _start(RUN_PLANT, tmp)
    control = _start(RUN_CONTROL, tmp)
    try:
        def alive() -> None:
            for name, proc in (("plant", plant), ("control", control)):
                if proc.poll() is not None:
                    raise AssertionError(f"estate {name} exited with {proc.returncode}: {proc.stdout.read().decode(errors='replace')}")

        def acknowledged() -> bool:
            alive()
            return ALARM in _log(folder, "control", "manor") and SWITCHED_ON in _log(folder, "plant", "relay") \
                and ACKED_ON in _log(folder, "control", "manor")

        wait_for(acknowledged, timeout=30.0, every=0.1, what="control's alarm, plant's switch and its acknowledgement")

        # The run is over when the sensor has sent its readings, control has them all (its status says
        # so: status files are rewritten every half second), and every command control sent has been
        # switched by the relay and acknowledged back.
        def settled() -> dict | None:
            alive()
            control_log = _log(folder, "control", "manor")
            commands = _said(control_log, ALARM, NORMAL)
            switched = _said(_log(folder, "plant", "relay"), SWITCHED)
            acked = _said(control_log, ACKED)
            if SENSOR_DONE not in _log(folder, "plant", "sensor") or not len(commands) == len(switched) == len(acked):
                return None
            snapshot = _status(STATUS_CONTROL_JSON, tmp)
            routes = _routes(snapshot)
            if routes.get(READING) != READINGS or routes.get(ACK) != len(acked):
                return None
            return {"snapshot": snapshot, "commands": commands, "acked": acked, "switched": switched}

        seen = wait_for(settled, timeout=30.0, every=0.2, what=f"{READINGS} readings at control, every command acknowledged")
        commands, acked, switched = seen["commands"], seen["acked"], seen["switched"]
        # the thermostat: normal (fan off) first, then alarm, and so on, each command switched and acknowledged
        assert commands[:2] == [NORMAL, ALARM] and all(a != b for a, b in zip(commands, commands[1:])), commands
        assert [s.rpartition("value=")[2] for s in switched] == [c.rpartition("value=")[2] for c in acked] \
            == ["'off'" if c == NORMAL else "'on'" for c in commands]

        # flowcast status: both remotes present, the routes, nothing denied, no errors back
        control_now = seen["snapshot"]
        assert _routes(control_now) == {READING: READINGS, COMMAND: len(commands), ACK: len(commands)}
        # plant's status files are rewritten every half second too, on their own: wait for them to catch up
        at_plant = {READING: READINGS, COMMAND: len(commands), ACK: len(commands), FAN: len(commands)}
        def plant_caught_up() -> dict | None:
            snapshot = _status(STATUS_PLANT, tmp)
            return snapshot if _routes(snapshot) == at_plant else None

        plant_now = wait_for(plant_caught_up, timeout=5.0, every=0.2, what=f"plant's status showing the routes {at_plant}")
        for snapshot, estate, remote, yards in ((control_now, "control", "plant", ["manor"]),
                                                 (plant_now, "plant", "control", ["sensor", "relay"])):
            assert snapshot["estate"] == estate
            assert snapshot["roads"]["main"]["remotes"] == {remote: "alive"}, snapshot["roads"]
            assert [h["yard"] for h in snapshot["houses"]] == yards
            # "starting" until a house has been up 10 s (the supervisor's healthy_after), then "running"
            assert all(h["state"] in ("starting", "running") and h["alive"] and h["restarts"] == 0 and not h["last_error"]
                       for h in snapshot["houses"]), snapshot["houses"]
            assert snapshot["denials"]["count"] == 0 and snapshot["denials"]["last"] == [], snapshot["denials"]
            assert snapshot["errors_back"]["count"] == 0, snapshot["errors_back"]
            assert snapshot["policy"].get("denied", 0) == 0 and "replaced" not in snapshot["policy"], snapshot["policy"]
        assert control_now["policy"]["allowed"] == READINGS + len(commands)  # each reading and acknowledgement, once
        assert plant_now["policy"]["allowed"] == len(commands)  # each command
        # the text view says the same
        text = _run(STATUS_CONTROL, tmp)
        assert re.search(r"^    plant +alive$", text, re.M) and "\ndenials 0\n" in text and "errors back" not in text, text
    finally:
        # plant first: the sender of the readings (they are all sent by now, so the order changes nothing)
        stopped = _stop({"plant": plant, "control": control})
    for name, (code, out) in stopped.items():
        assert code == 0, out
        assert "events recorded under" in out and str(folder / "run" / "events") in out, out
    for estate, yard in (("plant", "sensor"), ("plant", "relay"), ("control", "manor")):
        log = _log(folder, estate, yard)
        assert f"house {yard} exported 1 segment(s)" in log and f"house {yard} stopped (SIGTERM)" in log, log
        assert not re.search(r" (WARNING|ERROR|CRITICAL) |Traceback", log), log
    assert not any((folder / "run" / "events" / ".journal").rglob("*.arrows")), "an open segment was left behind"

    out = _run(EXPORT, tmp)
    collected = folder / "run" / "collected"
    assert sorted(p.parent.name for p in collected.rglob("*.parquet")) == ["manor", "relay", "sensor"], out
    return collected


def test_the_walkthrough_runs_as_the_doc_says(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    started = time.monotonic()
    collected = run_first_estate(tmp_path)
    rows = pa.concat_tables([pq.read_table(f) for f in sorted(collected.rglob("*.parquet"))]).to_pylist()
    temperature = sorted((r for r in rows if (r["estate"], r["house"], r["kind"], r["share"]) == ("plant", "sensor", "share", "temperature")),
                         key=lambda r: r["ts"])
    values = [json.loads(r["fields"])["value"] for r in temperature]
    # the sensor, deterministic: +0.5 a reading from 20.0 while the fan is off, -1.0 while it is on
    assert len(values) == READINGS and values[:10] == [20.5 + 0.5 * i for i in range(10)], values
    assert all(round(b - a, 2) in (0.5, -1.0) for a, b in zip(values, values[1:])), values
    assert max(values) >= 25.0 and -1.0 in {round(b - a, 2) for a, b in zip(values, values[1:])}
    # control logged each acknowledgement, plant's relay each command
    acks = [json.loads(r["fields"])["value"] for r in rows if (r["estate"], r["kind"], r["share"]) == ("control", "share", "fan.ack")]
    commands = [json.loads(r["fields"])["value"] for r in rows if (r["estate"], r["kind"], r["share"]) == ("plant", "share", "fan.command")]
    # (a logged share records what is written once the house runs, not its init)
    assert acks == commands == [("off", "on")[i % 2] for i in range(len(commands))] and len(commands) >= 3, (acks, commands)
    assert time.monotonic() - started < 40.0


# -- "Try things" ----------------------------------------------------------------------

ACK_RULE = """  - allow: write              # the relay house's acknowledgements
    estate: plant
    share: fan.ack
    tag: ack
"""
#: What the doc quotes of a denied acknowledgement: control's log line (after its time and yard) ...
DENIED_LOG = ("WARNING denied: write of 'fan.ack' by 'plant' (estate) on 'main' denied by policy; "
              "to allow it: {allow: write, estate: plant, share: fan.ack} "
              "(src fan.ack@relay.plant/main, dst fan.ack@.control/main, tag 'ack')")
HINT = "to allow it: {allow: write, estate: plant, share: fan.ack}"
#: ... the relay's, which has the reason but not the hint ...
ERROR_BACK_LOG = ("WARNING error back from fan.ack@manor.control/main for fan.ack@relay.plant/main: "
                  "denied: write of 'fan.ack' by 'plant' (estate) on 'main' denied by policy\n")
#: ... and plant's status.
ERRORS_BACK = "errors back {n} (denied {n}): this estate's messages refused elsewhere, in SHARE.error"
#: What ``flowcast check`` says of a misspelt frame, as the doc shows it.
MISSPELT = """examples/first-estate/thermostat.yaml:22:18: error: unknown frame 'alarn'
              - {go: alarn, if: .temperature >= 25.0}
                     ^
  did you mean 'alarm'?
"""


def test_a_denied_route_looks_as_the_doc_says(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert DENIED_LOG in text and ERROR_BACK_LOG in text and ERRORS_BACK.format(n="N") in text
    folder = copy_example(tmp_path)
    _replace_once(folder / "control.yaml", ACK_RULE, "")
    plant = _start(RUN_PLANT, tmp_path)
    control = _start(RUN_CONTROL, tmp_path)
    try:
        def denied() -> tuple[dict, dict] | None:
            for name, proc in (("plant", plant), ("control", control)):
                if proc.poll() is not None:
                    raise AssertionError(f"estate {name} exited with {proc.returncode}: {proc.stdout.read().decode(errors='replace')}")
            if ERROR_BACK_LOG not in _log(folder, "plant", "relay"):
                return None
            at_control = _status(STATUS_CONTROL_JSON, tmp_path)
            at_plant = _status(STATUS_PLANT, tmp_path)
            if at_control["denials"]["count"] < 1 or at_plant["errors_back"]["count"] != at_control["denials"]["count"]:
                return None
            return at_control, at_plant

        at_control, at_plant = wait_for(denied, timeout=30.0, every=0.2, what="an acknowledgement denied at control")
        n = at_control["denials"]["count"]
        assert at_control["denials"]["by_kind"] == {"denied": n} and at_plant["errors_back"]["by_kind"] == {"denied": n}
        assert at_plant["denials"]["count"] == 0  # the commands are still let in
        last = at_control["denials"]["last"][-1]
        assert (last["src"], last["dst"], last["tag"], last["kind"]) == ("fan.ack@relay.plant/main", "fan.ack@.control/main", "ack", "denied")
        assert last["reason"].endswith(HINT), last
        control_text = _run(STATUS_CONTROL, tmp_path)  # (more may have been denied since: the counts are N)
        assert re.search(r"^denials (\d+) \(denied \1\)$", control_text, re.M) and HINT in control_text, control_text
        control_log, relay_log = _log(folder, "control", "manor"), _log(folder, "plant", "relay")
        assert DENIED_LOG in control_log and ACKED not in control_log, control_log
        assert ERROR_BACK_LOG in relay_log and "to allow it" not in relay_log, relay_log
        assert SWITCHED in relay_log  # the relay did switch the fan: only its acknowledgement was refused
        plant_text = _run(STATUS_PLANT_ONCE, tmp_path)
        said = re.search(r"^errors back (\d+) \(denied \1\): ", plant_text, re.M)
        assert said and ERRORS_BACK.format(n=said.group(1)) in plant_text, plant_text
    finally:
        stopped = _stop({"plant": plant, "control": control})
    assert [code for code, _ in stopped.values()] == [0, 0], stopped


def test_a_misspelt_frame_is_found_as_the_doc_says(tmp_path: Path) -> None:
    assert MISSPELT in DOC.read_text(encoding="utf-8")
    folder = copy_example(tmp_path)
    _replace_once(folder / "thermostat.yaml", "{go: alarm, if", "{go: alarn, if")
    done = subprocess.run(_argv(CHECK_CONTROL), cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and MISSPELT in done.stdout + done.stderr, done
