"""bench/receive.py still runs: tiny sizes, --json, every figure present with its floor ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_receive_bench_quick_json():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "receive.py"), "--quick", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    figures = data["figures"]
    assert sorted(figures) == ["recv_100B", "recv_64KiB", "recv_64KiB_1200", "recv_64KiB_1200_reordered"]
    for name, figure in figures.items():
        assert figure["value"] > 0 and figure["ratios"]["x floor"] > 0, name
