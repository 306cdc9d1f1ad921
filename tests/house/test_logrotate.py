"""A house's log is kept to a size: rotated, with a few old files, whatever writes to it (issue 14, item 4)."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import logging, os, sys
from flowcast.house.logrotate import install
rotator = install(max_bytes=1000, keep=2)
assert rotator is not None
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
for i in range(40):
    print(f"line {i:03d} " + "x" * 90)
    if i % 10 == 9:
        logging.info(f"logged {i:03d} " + "y" * 90)
os.write(2, b"straight to fd 2 at the end\\n")
print("done", rotator.rotations)
"""


def test_the_log_rotates_by_size_keeping_the_newest_files(tmp_path):
    log = tmp_path / "house.log"
    with open(log, "ab") as out:
        done = subprocess.run([sys.executable, "-c", CHILD], stdout=out, stderr=out, timeout=30)
    assert done.returncode == 0, log.read_text()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["house.log", "house.log.1", "house.log.2"]  # keep=2: the oldest went
    for path in tmp_path.iterdir():
        assert path.stat().st_size <= 1000 + 200  # the limit, plus the line that crossed it
    newest = log.read_text()
    assert newest.endswith("straight to fd 2 at the end\ndone 4\n")  # C-level writes follow the rotation too
    kept = "".join((tmp_path / name).read_text() for name in ("house.log.2", "house.log.1", "house.log"))
    numbers = [int(line[5:8]) for line in kept.splitlines() if line.startswith("line ")]
    assert numbers == list(range(numbers[0], 40)) and numbers[0] > 0  # the newest, in order, none lost; the oldest gone
    assert "logged 039" in kept


def test_it_is_not_installed_when_stdout_is_not_the_log(tmp_path):
    done = subprocess.run([sys.executable, "-c", "from flowcast.house.logrotate import install; print(install())"],
                          capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "None"
