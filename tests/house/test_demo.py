"""README's demo command: ping-pong between two estates, end to end, as processes."""

from __future__ import annotations

import subprocess
import sys

from tests.house.estates import ROOT


def test_demo_plays_five_volleys_and_stops_cleanly():
    done = subprocess.run(
        [sys.executable, "-m", "flowcast.cli.main", "demo", "--timeout", "30"],
        cwd=ROOT, capture_output=True, text=True, timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert [f"pong: ball.in value={n}" in out for n in range(1, 6)] == [True] * 5
    assert "ping-pong over: five volleys returned" in out
    assert "beta  alive" in out  # flowcast status, as seen from alpha
    assert "5  ball.out@manor.alpha/main -> ball.in@.beta/main" in out
