"""bench/routes.py still runs: tiny sizes, --json, every figure present, well within 30 s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_routes_bench_quick_json():
    command = [
        sys.executable,
        str(ROOT / "bench" / "routes.py"),
        "--quick",
        "--json",
        "--count", "2000",
        "--remotes", "3,6",
        "--routes", "10",
        "--check", "3",
    ]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["script"] == "routes" and data["settings"]["remotes"] == [3, 6]
    figures = data["figures"]
    expected = [
        "routed_100B",
        "road_100B",
        "routed_100B_single",
        "hub_bytes_alone",
        "hub_bytes_per_remote_3",
        "hub_bytes_per_remote_6",
        "hub_setup_3",
        "hub_setup_6",
        "hub_idle_cpu_6",
        "hub_bytes_per_route_in",
        "hub_bytes_per_route_out",
        "world_bytes_per_remote_3",
    ]
    missing = [name for name in expected if name not in figures]
    assert not missing, (missing, proc.stdout[-2000:])
    for name in expected:
        value = figures[name]["value"]
        assert isinstance(value, (int, float)) and value > 0, (name, figures[name])
    routed = figures["routed_100B"]
    assert set(routed["ratios"]) == {"x target", "x direct road"}
    assert routed["unit"] == "msgs/s" and "cpu_us_per_msg" in routed
    assert "x goal" in figures["hub_bytes_per_remote_6"]["ratios"]
    assert 0.5 < figures["world_bytes_per_remote_3"]["ratios"]["walk/traced"] < 1.5
