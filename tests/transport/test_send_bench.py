"""bench/send.py still runs: tiny sizes, --json, every figure present with its floor ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_send_bench_quick_json():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "send.py"), "--quick", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(proc.stdout)["figures"]
    assert sorted(figures) == ["send_100B", "send_100B_each", "send_64KiB_1200"]
    for name, figure in figures.items():
        assert figure["value"] > 0 and figure["ratios"]["x floor"] > 0, name
