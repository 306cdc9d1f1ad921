"""README's CAST demo: estates abc and xyz as processes, xyz stopped and started again mid-stream."""

from __future__ import annotations

import json
import subprocess
import sys

from flowcast.house.castdemo import COUNT, _check
from tests.house.estates import ROOT


def test_demo_cast_delivers_everything_once_in_order_across_a_stop():
    done = subprocess.run(
        [sys.executable, "-m", "flowcast.cli.main", "demo", "cast", "--timeout", "50"],
        cwd=ROOT, capture_output=True, text=True, timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "estate xyz is stopped" in out and "abc's cache holds all 60 lines" in out
    assert "checked: bob got lines 0..59 exactly once, in order, across the stop" in out
    assert "messages 60  bytes" in out  # flowcast cast stats, read-only while abc runs


def _write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_demo_check_catches_a_duplicate_a_loss_and_overlapping_halves(tmp_path):
    run = tmp_path / "houses" / "run" / "xyz"
    lines = [{"seq": i + 1, "id": f"{i:032x}", "text": f"hello bob, line {i}"} for i in range(COUNT)]
    _write(run / "bob.jsonl", lines)
    _write(run / "half0.jsonl", lines[::2])
    _write(run / "half1.jsonl", lines[1::2])
    assert _check(tmp_path) == []
    _write(run / "bob.jsonl", lines + lines[-1:])
    assert "1 twice" in _check(tmp_path)[0]
    _write(run / "bob.jsonl", lines[:-1])
    assert _check(tmp_path)
    _write(run / "bob.jsonl", lines)
    _write(run / "half1.jsonl", lines[1::2] + lines[:1])
    assert any("share 1" in p for p in _check(tmp_path))
