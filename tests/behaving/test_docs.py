"""docs/behaviours.md stays true: its example runs as it says, and every stock behaviour is described.

The example is taken from the page itself (its Python block and its flow
block), written into a fresh folder laid out as the page says, and run
with ``flowcast run --virtual`` from there, so a change to the runtime that
breaks what the page teaches fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from flowcast.behaving.registry import Registry, canonical_name

DOC = Path(__file__).resolve().parents[2] / "docs" / "behaviours.md"


def _blocks() -> tuple[str, str]:
    text = DOC.read_text()
    blocks = re.findall(r"```(\w*)\n(.*?)```", text, re.S)
    python = [body for kind, body in blocks if kind == "python"]
    flow = [body for kind, body in blocks if kind == "" and body.startswith("house ")]
    assert len(python) == 1 and len(flow) == 1, "the page has one Python example and one flow"
    return python[0], flow[0]


def test_the_example_runs_as_the_page_says(tmp_path):
    python, flow = _blocks()
    (tmp_path / "behaviors").mkdir()
    (tmp_path / "flows").mkdir()
    (tmp_path / "behaviors" / "thermo.py").write_text(python)
    (tmp_path / "flows" / "thermo.flo").write_text(flow)
    done = subprocess.run([sys.executable, "-m", "flowcast.cli.main", "run", "flows/thermo.flo", "--virtual", "--until", "30",
                           "--trace"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "main watching -> done" in out
    assert "last: thermo.reading value=22.5 stamp=0.5" in out
    alarms = re.findall(r"'value': ([0-9.]+), 'limit': 21\.0", out.split("alarms:")[1])
    assert alarms == ["21.5", "22.0", "22.5"]


def test_every_stock_behaviour_is_described():
    text = DOC.read_text()
    described = {canonical_name(name) for name in re.findall(r"^### (.*)$", text, re.M) for name in re.findall(r"`([a-z ]+)`", name)}
    registry = Registry()
    registry.load_entry_points()
    missing = sorted(set(registry.names()) - described)
    assert missing == [], f"docs/behaviours.md does not describe: {missing}"


def test_a_missing_module_is_reported_at_its_load_line_with_the_places_looked_in(tmp_path):
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "bad.flo").write_text("house x\nload behaviors/nope.py\nframer main be active first a\n  frame a\n"
                                                 "    do show from .x\n")
    done = subprocess.run([sys.executable, "-m", "flowcast.cli.main", "check", "flows/bad.flo"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    said = done.stdout + done.stderr
    assert "flows/bad.flo:2:6: error: behaviour module 'behaviors/nope.py' not found" in said
    assert str(tmp_path / "flows" / "behaviors" / "nope.py") in said and str(tmp_path / "behaviors" / "nope.py") in said
