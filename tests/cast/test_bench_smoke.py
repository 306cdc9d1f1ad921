"""bench/cast.py still runs: tiny sizes, --json, every figure of the issue present (cache and road), with its peer or a reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["cast_publish_100B", "cast_replay_100B", "cast_live_100B", "cast_live_cpu_us", "cast_live_p50_us", "cast_live_p99_us",
         "cast_live_none_100B", "cast_live_none_cpu_us", "cast_live_none_p50_us", "cast_live_none_p99_us",
         "cast_bytes_per_subscription", "cast_replay_cache_100B", "cast_bytes_per_message",
         "peer.jetstream_publish_100B", "peer.jetstream_replay_100B", "peer.jetstream_bytes_per_message",
         "stop_idle_s"]


def test_cast_bench_quick_json():
    command = [sys.executable, str(ROOT / "bench" / "cast.py"), "--quick", "--json", "--count", "3000"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["script"] == "cast" and data["settings"]["count"] == 3000
    figures = data["figures"]
    assert list(figures) == NAMES
    for name in NAMES:
        if not name.startswith("peer."):
            value = figures[name]["value"]
            assert isinstance(value, (int, float)) and value > 0, (name, figures[name])
    assert 100 < figures["cast_bytes_per_message"]["value"] < 2000  # 100 B of data plus what a row costs
    assert 100 < figures["cast_bytes_per_subscription"]["value"] < 100_000
    assert figures["cast_live_p50_us"]["value"] <= figures["cast_live_p99_us"]["value"]
    # acknowledged processing against the at-most-once path, same run: the ratio is stated
    cpu = figures["cast_live_cpu_us"]
    assert cpu["ratios"]["x ack none"] == pytest.approx(cpu["value"] / figures["cast_live_none_cpu_us"]["value"])
    # the stop time with drain (bench/stop.py): one idle stop with --quick, nothing reported undelivered
    stop = figures["stop_idle_s"]
    assert stop["runs"] and stop["undelivered"] == [0] and stop["value"] == pytest.approx(stop["runs"][0])
    # The replay figure is the road's (the definition), against the in-process read of the same count.
    replay = figures["cast_replay_100B"]
    assert "over a loopback road" in replay["note"] and replay["cache_read"] > 0
    assert replay["ratios"]["x cache read"] == pytest.approx(replay["value"] / replay["cache_read"])
    assert data["settings"]["rate"] == 2000.0 and "at 2,000 msgs/s offered" in figures["cast_live_p50_us"]["note"]
    for ours, peer in (("cast_publish_100B", "peer.jetstream_publish_100B"),
                       ("cast_replay_100B", "peer.jetstream_replay_100B"),
                       ("cast_replay_cache_100B", "peer.jetstream_replay_100B")):
        if figures[peer]["value"] is None:  # the peer could not run here: it says why
            assert figures[peer]["note"] and "peer n/a" in figures[ours]["note"]
        else:
            ratio = figures[ours]["ratios"]["x jetstream"]
            assert abs(ratio - figures[ours]["value"] / figures[peer]["value"]) < 1e-6 * ratio
