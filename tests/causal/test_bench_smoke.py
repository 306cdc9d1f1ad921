"""bench/causal.py still runs: tiny sizes, --json, every figure of the issue present with its reference ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: figure -> (its ratio, the same-run reference the ratio divides by, kept beside the figure)
FIGURES = {
    "causal_mailbox_chain": ("x toposort", "toposort_per_s"),
    "causal_mailbox_dag": ("x toposort", "toposort_per_s"),
    "causal_verified": ("x verify limit", "verifies_per_s"),
    "causal_bytes_per_buffered": ("x wire size", "wire_bytes"),
    "causal_fetch_ms": ("x road rtt", "road_rtt_ms"),
}


def test_causal_bench_quick_json():
    command = [sys.executable, str(ROOT / "bench" / "causal.py"), "--quick", "--json"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=55)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["script"] == "causal" and data["settings"]["quick"] is True
    figures = data["figures"]
    assert list(figures) == list(FIGURES)
    for name, (ratio, reference) in FIGURES.items():
        figure = figures[name]
        value = figure["value"]
        assert isinstance(value, (int, float)) and value > 0, (name, figure)
        assert ratio in figure.get("ratios", {}), (name, figure)
        assert figure[reference] > 0, (name, figure)
        # Each ratio is the figure over its reference measured in the same run (wire_bytes is rounded).
        assert figure["ratios"][ratio] == pytest.approx(value / figure[reference], rel=1e-2), (name, figure)
    assert "over loopback UDP" in figures["causal_fetch_ms"]["note"]
    assert "verifies/s one core does" in figures["causal_verified"]["note"]
