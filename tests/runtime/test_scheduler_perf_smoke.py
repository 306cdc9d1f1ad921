"""bench/scheduler.py still runs and prints well-formed figures.

Only the shape is checked: timings depend on the machine and its load, so a
test asserting them would fail for reasons unrelated to the code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "scheduler.py"
LINE = re.compile(r"^(?P<name>[^:]+): (?P<value>n/a|[-+0-9.e]+) (?P<unit>\S+)(?: \((?P<notes>.*)\))?$")

pytest.importorskip("ioflo", reason="the house-build figure compares with ioflo 2.0.3")


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quick_run_prints_one_well_formed_line_per_figure():
    lines = _run().splitlines()
    names = []
    for line in lines:
        match = LINE.match(line)
        assert match, f"malformed figure line: {line!r}"
        names.append(match["name"])
    for k in (1, 100, 1000, 10000):
        for who in ("flowcast", "bare", "asyncio"):
            assert f"switches.K={k}.{who}" in names
        assert "flowcast/bare" in lines[names.index(f"switches.K={k}.flowcast")]
        assert "flowcast/asyncio" in lines[names.index(f"switches.K={k}.flowcast")]
    assert any(n.startswith("house_build.") and n.endswith(".ioflo") for n in names)


def test_quick_json_is_one_object_of_all_figures():
    data = json.loads(_run("--json"))
    figures = data["figures"]
    assert data["script"] == "bench/scheduler.py"
    assert {"python", "cpus"} <= set(data["machine"])
    for k in (1, 100, 1000, 10000):
        flowcast = figures[f"switches.K={k}.flowcast"]
        assert flowcast["unit"] == "M/s" and flowcast["value"] > 0
        assert set(flowcast["ratios"]) == {"flowcast/bare", "flowcast/asyncio"}
    ioflo = [v for n, v in figures.items() if n.startswith("house_build.") and n.endswith(".ioflo")]
    assert ioflo and ioflo[0]["value"] > 0
