"""bench/cast_e2e.py still runs: tiny sizes, --json, every figure present with its ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cast_e2e_bench_quick_json():
    command = [sys.executable, str(ROOT / "bench" / "cast_e2e.py"), "--quick", "--json", "--count", "500"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["script"] == "cast_e2e" and data["settings"]["count"] == 500
    figures = data["figures"]
    for name, ratio in (("cast_e2e_seal_100B", "x raw box"), ("cast_e2e_open_100B", "x raw box"),
                        ("cast_e2e_publish_100B", "x plain"), ("cast_e2e_bytes_per_message", "x plain")):
        value = figures[name]["value"]
        assert isinstance(value, (int, float)) and value > 0 and figures[name]["ratios"][ratio] > 0, (name, figures[name])
    # a sealed 100-byte body is bigger than a plain one, and not by an order of magnitude
    assert 1.0 < figures["cast_e2e_bytes_per_message"]["ratios"]["x plain"] < 3.0
