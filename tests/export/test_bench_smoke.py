"""bench/export.py still runs and prints well-formed figures.

Only the shape is checked: timings depend on the machine and its load.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "export.py"
LINE = re.compile(r"^(?P<name>[^:]+): (?P<value>[-+0-9.e]+) (?P<unit>\S+)(?: \((?P<notes>.*)\))?$")


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--repeats", "1", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_one_line_per_figure_with_ratios_to_target_and_baseline() -> None:
    lines = _run().splitlines()
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    assert [m["name"] for m in matches] == [
        "list.append baseline",
        "recorder.message (all-in, to Parquet)",
        "logged share update, recorder cost",
        "routed message, recorder cost",
        "routed message, recorder detached",
    ]
    assert "x target 3 µs" in matches[1]["notes"] and "x baseline" in matches[1]["notes"]


def test_json_is_one_object() -> None:
    data = json.loads(_run("--json"))
    assert data["script"] == "bench/export.py"
    assert data["figures"]["recorder.message (all-in, to Parquet)"]["unit"] == "µs/event"
