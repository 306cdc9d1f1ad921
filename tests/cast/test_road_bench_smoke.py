"""bench/cast_road.py still runs: tiny sizes, --json, every figure present (measured once the SQLite cache is there)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["cast_replay_100B", "cast_live_100B", "cast_live_cpu_us", "cast_live_p50_us", "cast_live_p99_us",
         "cast_live_none_100B", "cast_live_none_cpu_us", "cast_live_none_p50_us", "cast_live_none_p99_us",
         "cast_bytes_per_subscription", "peer.jetstream_replay_100B"]


def test_cast_road_bench_quick_json():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "cast_road.py"), "--quick", "--json", "--no-peer"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(proc.stdout)["figures"]
    assert list(figures) == NAMES
    assert 100 < figures["cast_bytes_per_subscription"]["value"] < 100_000
    assert figures["peer.jetstream_replay_100B"]["note"] == "left out (--no-peer)"
    if importlib.util.find_spec("flowcast.cast.cache") is None:
        assert all("needs the SQLite cache" in figures[name]["note"] for name in NAMES if name.startswith("cast_live"))
    else:
        assert all(figures[name]["value"] > 0 for name in NAMES if not name.startswith("peer.")), figures
        assert figures["cast_replay_100B"]["ratios"]["x cache read"] > 0
