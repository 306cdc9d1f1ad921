"""``flowcast demo cast``: federated messaging over CAST between estates abc and xyz, narrated.

alice at abc writes 60 lines to bob at xyz (``houses/cast-abc.yaml``,
``houses/cast-xyz.yaml``, ``flows/cast-*.flo``).  Both estates run as real
``flowcast run`` processes on loopback.  Part-way through, xyz is stopped;
alice keeps publishing (abc's cache acknowledges each line once it is on
disk); xyz is started again and resyncs from the cursors its inboxes kept.
The demo exits 0 only if bob got every line exactly once, in order, and
the two receivers splitting the stream with ``mod 2`` got disjoint halves
whose union is everything.  Every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowcast.house.demo import demo_root

COUNT = 60  # what flows/cast-alice.flo writes
ESTATES = ("xyz", "abc")


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def _cached(root: Path) -> int:
    """How many messages abc's cache holds, read-only (as ``flowcast cast stats`` reads it)."""
    from flowcast.cast import Cache, CacheError

    path = root / "houses" / "run" / "abc" / "cast" / "cache.sqlite3"
    if not path.exists():
        return 0
    try:
        cache = Cache.open(path, estate="abc", readonly=True, check=False)
    except CacheError:
        return 0
    try:
        return int(cache.stats()["messages"])
    except CacheError:
        return 0
    finally:
        cache.close()


class _Estates:
    """The two ``flowcast run`` processes, each its own session so a stop reaches its houses."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: dict[str, subprocess.Popen] = {}
        self.outputs: dict[str, Any] = {}
        self.stopped: set[str] = set()  # by the demo, on purpose

    def start(self, name: str) -> None:
        output = self.outputs.setdefault(name, tempfile.TemporaryFile())
        self.stopped.discard(name)
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "flowcast.cli.main", "run", str(self.root / "houses" / f"cast-{name}.yaml")],
            cwd=self.root, start_new_session=True, stdout=output, stderr=subprocess.STDOUT)

    def stop(self, name: str) -> int | None:
        process = self.processes[name]
        self.stopped.add(name)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        return process.returncode

    def died(self) -> str | None:
        for name, process in self.processes.items():
            if name not in self.stopped and process.poll() is not None:
                return name
        return None

    def output(self, name: str) -> str:
        handle = self.outputs[name]
        handle.seek(0)
        return handle.read().decode(errors="replace")


def _wait(what: str, done: Callable[[], bool], estates: _Estates, until: float) -> bool:
    while time.monotonic() < until:
        if done():
            return True
        dead = estates.died()
        if dead is not None:
            print(f"flowcast demo cast: estate {dead} stopped on its own while waiting for {what}", file=sys.stderr)
            return False
        time.sleep(0.1)
    print(f"flowcast demo cast: no {what} in time", file=sys.stderr)
    return False


def _check(root: Path) -> list[str]:
    """What went wrong, if anything: bob once and in order, the halves disjoint and complete."""
    run = root / "houses" / "run" / "xyz"
    bob = _records(run / "bob.jsonl")
    halves = [_records(run / "half0.jsonl"), _records(run / "half1.jsonl")]
    expected = [f"hello bob, line {i}" for i in range(COUNT)]
    problems = []
    texts = [r.get("text") for r in bob]
    if texts != expected:
        twice = len(texts) - len(set(texts))
        problems.append(f"bob got {len(texts)} lines ({twice} twice), not lines 0..{COUNT - 1} once in order")
    ids = [{r["id"] for r in half if "id" in r} for half in halves]
    if ids[0] & ids[1]:
        problems.append(f"the halves share {len(ids[0] & ids[1])} lines")
    if ids[0] | ids[1] != {r["id"] for r in bob if "id" in r} or sum(len(h) for h in halves) != COUNT:
        problems.append(f"the halves hold {len(halves[0])} + {len(halves[1])} lines, not the {COUNT} bob got, each once")
    if any("gap" in r for r in bob + halves[0] + halves[1]):
        problems.append("a receiver was told of a gap")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flowcast demo cast", description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds (default 60)")
    args = parser.parse_args(argv)
    root = demo_root("flowcast demo cast", "houses/cast-abc.yaml", "houses/cast-xyz.yaml", "flows/cast-alice.flo",
                     "flows/cast-bob.flo", "behaviors/cast_demo.py")
    if root is None:
        return 2
    for name in ESTATES:
        shutil.rmtree(root / "houses" / "run" / name, ignore_errors=True)  # a fresh cache, fresh inboxes
    run = root / "houses" / "run" / "xyz"
    until = time.monotonic() + args.timeout
    print("flowcast demo cast: alice at estate abc writes 60 lines to bob at estate xyz over CAST (UDP 7560, 7561)")
    print("  abc stores each line in its cache (on disk before it is acknowledged) and forwards it to xyz's subscriptions;")
    print("  at xyz, bob takes every line and half0/half1 split the stream with 'mod 2' (evaluated at abc)\n")
    estates = _Estates(root)
    ok = False
    try:
        estates.start("xyz")
        estates.start("abc")
        if not _wait("first lines at bob", lambda: len(_records(run / "bob.jsonl")) >= 15, estates, until):
            return 1
        got = len(_records(run / "bob.jsonl"))
        estates.stop("xyz")
        print(f"1. bob has {got} lines; estate xyz is stopped (SIGTERM to all its houses)")
        if not _wait("line 60 in abc's cache", lambda: _cached(root) >= COUNT, estates, until):
            return 1
        print(f"2. while xyz was down, alice went on: abc's cache holds all {COUNT} lines, each acknowledged on disk")
        estates.start("xyz")
        print("3. xyz is started again: each receiver subscribes from the cursor its inbox kept")
        complete = lambda: len(_records(run / "bob.jsonl")) >= COUNT and (  # noqa: E731
            len(_records(run / "half0.jsonl")) + len(_records(run / "half1.jsonl")) >= COUNT)
        if not _wait("complete delivery after the restart", complete, estates, until):
            return 1
        time.sleep(1.5)  # anything delivered twice would land now; and a status file is written for 'ls'
        bob = _records(run / "bob.jsonl")
        halves = [len(_records(run / f"half{k}.jsonl")) for k in (0, 1)]
        print(f"4. bob got {len(bob)} lines, {got} before the stop and {len(bob) - got} after it;"
              f" half0 took {halves[0]}, half1 {halves[1]}\n")
        from flowcast.house.castcli import main as cast_cli

        print("$ flowcast cast stats houses/cast-abc.yaml")
        cast_cli(["stats", str(root / "houses" / "cast-abc.yaml")])
        print("$ flowcast cast ls houses/cast-xyz.yaml")
        cast_cli(["ls", str(root / "houses" / "cast-xyz.yaml")])
        problems = _check(root)
        for problem in problems:
            print(f"flowcast demo cast: FAILED: {problem}", file=sys.stderr)
        ok = not problems
        if ok:
            print(f"\nchecked: bob got lines 0..{COUNT - 1} exactly once, in order, across the stop;"
                  " half0 and half1 are disjoint and together hold every line")
    finally:
        codes = {name: estates.stop(name) for name in list(estates.processes)}
        for name, code in codes.items():
            if code not in (0, -signal.SIGTERM) or not ok:
                print(f"\n{name} exited {code}:\n{estates.output(name)[-4000:]}", file=sys.stderr)
    print(f"flowcast demo cast: {'done' if ok else 'failed'}; logs in {root / 'houses' / 'run'}/*/logs")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
