"""A house that meets a damaged store file says so in one line, exits 3 and is held at once.

Real `flowcast run` processes on loopback.  Before: an empty inbox was taken
for a new one (every message delivered again), and a damaged inbox or ledger
stopped the house with a traceback, restarted five times.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowcast.house.status import collect, render
from tests.house.estates import start_estate, stop_estate

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process semantics")


def _layout(tmp_path: Path) -> Path:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "idle.flo").write_text("house idle\nframer idle be active first rest\n  frame rest\n    print resting\n")
    path = tmp_path / "est.yaml"
    path.write_text("estate: est\nhouses:\n  - {name: manor, flow: flows/idle.flo, manor: true}\ncast:\ncausal:\n")
    return path


def _run_to_end(layout: Path, timeout: float = 60.0) -> tuple[int, str]:
    process = start_estate(layout, houses=1)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_estate(process)
        raise AssertionError("flowcast run kept restarting a house whose file is damaged")
    return process.returncode, out.decode(errors="replace")


@pytest.mark.parametrize("name", ["inbox-manor.sqlite3", "cache.sqlite3", "causal.sqlite3"])
@pytest.mark.parametrize("damage", [b"", b"not a database at all " * 300], ids=["empty", "garbage"])
def test_a_damaged_store_is_named_in_one_line_exit_3_held_at_once(tmp_path, name, damage):
    layout = _layout(tmp_path)
    path = tmp_path / "run" / "est" / "cast" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(damage)
    started = time.monotonic()
    code, out = _run_to_end(layout)
    assert code == 3, out
    assert time.monotonic() - started < 30  # held at once, not after five back-offs
    exits = [line for line in out.splitlines() if "exited with code" in line]
    assert len(exits) == 1, out  # started once: a restart cannot mend a file
    assert "exited with code 3: house manor cannot start: " in exits[0] and str(path) in exits[0], out
    assert ("empty (0 bytes)" if not damage else "SQLite cannot") in exits[0], out
    assert "manor held: it refused to start (exit 3" in out and "Traceback" not in out, out
    assert path.read_bytes() == damage  # left as it was
    house_log = (tmp_path / "run" / "est" / "logs" / "manor.log").read_text()
    assert "Traceback" not in house_log, house_log
    snapshot = collect(tmp_path / "run" / "est")
    (house,) = snapshot["houses"]
    assert house["state"] == "held" and str(path) in house["last_error"] and "\n" not in house["last_error"]
    assert "refused to start, not restarted" in render(snapshot)


def test_a_cache_that_lost_committed_messages_stops_the_estate_in_one_line(tmp_path):
    from flowcast.cast import Cache
    from flowcast.cast.cachemark import write_mark

    layout = _layout(tmp_path)
    path = tmp_path / "run" / "est" / "cast" / "cache.sqlite3"
    cache = Cache.open(path, estate="est")
    for i in range(10):
        cache.publish(f"est/m/{i}", b"x")
    cache.close()
    write_mark(path, "est", 3000)  # what a WAL cut to zero after 3,000 commits leaves: a shorter cache, its mark
    before = path.read_bytes()
    code, out = _run_to_end(layout)
    assert code == 3, out
    exits = [line for line in out.splitlines() if "exited with code" in line]
    assert len(exits) == 1 and "exited with code 3: house manor cannot start: the CAST cache" in exits[0], out
    assert "lost committed messages" in exits[0] and "says seq 3000 was committed, but it ends at seq 10" in exits[0]
    assert "Traceback" not in out and path.read_bytes() == before
