"""bench/cast_export.py still runs and prints well-formed figures (only the shape: timings depend on the machine)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "cast_export.py"
LINE = re.compile(r"^(?P<name>[^:]+): (?P<value>[-+0-9.e]+) (?P<unit>\S+)(?: \((?P<notes>.*)\))?$")


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--repeats", "1", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_one_line_per_figure_with_ratios() -> None:
    matches = [LINE.match(line) for line in _run().splitlines()]
    assert all(matches)
    assert [m["name"] for m in matches] == [
        "list.append baseline",
        "recorder.cast (all-in, to Parquet)",
        "cast delivery, no listener",
        "cast delivery, recorder cost",
    ]
    assert "x target 3 µs" in matches[1]["notes"] and "x target 3 µs" in matches[3]["notes"]


def test_json_is_one_object() -> None:
    data = json.loads(_run("--json"))
    assert data["script"] == "bench/cast_export.py"
    assert data["figures"]["cast delivery, recorder cost"]["unit"] == "µs/delivery"
