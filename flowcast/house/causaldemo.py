"""``flowcast demo causal``: a collaborative log between three estates over lossy, reordering roads, narrated and checked.

Estates alpha, beta and gamma (``houses/causal-*.yaml``, ``flows/causal-log.flo``)
run as real ``flowcast run`` processes on loopback; their roads go through
two chaos relays started here (``ChaosRelay``, the same as ``flowcast
chaos``) that lose 10%, reorder 10% and duplicate 2% of the datagrams.
Their signing keys are made fresh in ``houses/run/causal-keys`` each run.
Each estate posts 10 lines to the topic ``log`` and answers every post of
the other two; an answer names its post as a dep.

The demo exits 0 only if every estate delivered all 90 messages, each
once, in an order where every message comes after all of its deps (a
linear extension of the message graph) -- so no answer before its post.
Every wait is bounded.
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

ESTATES = ("alpha", "beta", "gamma")
POSTS = 10  # what flows/causal-log.flo has each estate post
#: Each estate's posts, and one answer by each other estate to each of them.
TOTAL = len(ESTATES) * POSTS * len(ESTATES)
#: The chaos relays: listen port -> the estate port it forwards to (the layouts' remotes name the listen ports).
RELAYS = {7580: 7570, 7581: 7571}
FAULTS = {"loss": 0.10, "reorder": 0.10, "duplicate": 0.02, "delay": (0.001, 0.020)}


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # the line being written; the rest is read next time
    return out


def check(logs: dict[str, list[dict[str, Any]]], total: int = TOTAL) -> list[str]:
    """What went wrong, if anything: each estate's deliveries complete, once each, every one after its deps.

    A dep never delivered at an estate is a violation too: what an estate
    delivered must be closed under deps, or it delivered something early.
    """
    problems = []
    sets = {}
    for name, records in logs.items():
        order = [r["hash"] for r in records]
        at = {h: i for i, h in enumerate(order)}
        if len(at) != len(order):
            problems.append(f"{name} delivered {len(order) - len(at)} messages twice")
        if len(at) != total:
            problems.append(f"{name} delivered {len(at)} distinct messages, not {total}")
        for i, record in enumerate(records):
            early = [d for d in record["deps"] if at.get(d, len(order)) >= i]
            if early:
                problems.append(f"{name} delivered {record['hash'][:12]} ({record['text']!r}) before its dep {early[0][:12]}")
            answers = record.get("answers")
            if answers is not None and at.get(answers, len(order)) >= i:
                problems.append(f"{name} delivered the answer {record['text']!r} before the post it answers")
        sets[name] = set(at)
    names = list(sets)
    for other in names[1:]:
        if sets[other] != sets[names[0]]:
            problems.append(f"{names[0]} and {other} delivered different messages")
    return problems


class _Estates:
    """The ``flowcast run`` processes, each its own session so a stop reaches its houses."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: dict[str, subprocess.Popen] = {}
        self.outputs: dict[str, Any] = {}

    def start(self, name: str) -> None:
        output = self.outputs.setdefault(name, tempfile.TemporaryFile())
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "flowcast.cli.main", "run", str(self.root / "houses" / f"causal-{name}.yaml")],
            cwd=self.root, start_new_session=True, stdout=output, stderr=subprocess.STDOUT)

    def stop(self, name: str) -> int | None:
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        return process.returncode

    def died(self) -> str | None:
        return next((name for name, process in self.processes.items() if process.poll() is not None), None)

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
            print(f"flowcast demo causal: estate {dead} stopped on its own while waiting for {what}", file=sys.stderr)
            return False
        time.sleep(0.1)
    print(f"flowcast demo causal: no {what} in time", file=sys.stderr)
    return False


def _relays(seed: int) -> list[Any]:
    from flowcast.transport.chaos import ChaosRelay

    started = []
    try:
        for k, (listen, forward) in enumerate(RELAYS.items()):
            started.append(ChaosRelay(("127.0.0.1", listen), ("127.0.0.1", forward), seed=seed + k, **FAULTS).start())
    except BaseException:
        for relay in started:
            relay.close()
        raise
    return started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flowcast demo causal", description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=90.0, help="give up after this many seconds (default 90)")
    parser.add_argument("--seed", type=int, default=13, help="seed of the chaos relays' faults (default 13)")
    args = parser.parse_args(argv)
    root = demo_root("flowcast demo causal", *(f"houses/causal-{name}.yaml" for name in ESTATES), "flows/causal-log.flo",
                     "behaviors/causal_demo.py")
    if root is None:
        return 2
    from flowcast.causal.keys import create_signer

    run = root / "houses" / "run"
    for name in (*(f"causal-{e}" for e in ESTATES), "causal-keys"):
        shutil.rmtree(run / name, ignore_errors=True)  # fresh keys, caches, mailboxes and logs
    for name in ESTATES:
        create_signer(run / "causal-keys", name)
    print("flowcast demo causal: a collaborative log between estates alpha, beta and gamma (UDP 7570-7572)")
    print(f"  keys made in {run / 'causal-keys'}: alpha owns the topic 'log', all three publish to it")
    print(f"  every road goes through a chaos relay (7580 -> alpha, 7581 -> beta) losing {FAULTS['loss']:.0%},"
          f" reordering {FAULTS['reorder']:.0%} and duplicating {FAULTS['duplicate']:.0%} of the datagrams")
    print(f"  each estate posts {POSTS} lines and answers every post of the others; an answer names its post as a dep\n")
    try:
        relays = _relays(args.seed)
    except OSError as error:
        print(f"flowcast demo causal: cannot start the chaos relays on 7580-7581: {error}", file=sys.stderr)
        return 1
    estates = _Estates(root)
    logs = {name: run / f"causal-{name}" / "log.jsonl" for name in ESTATES}
    ok = False
    until = time.monotonic() + args.timeout
    started = time.monotonic()
    try:
        for name in ESTATES:
            estates.start(name)
        print("1. alpha, beta and gamma are running (flowcast run houses/causal-ESTATE.yaml)")
        if not _wait("first deliveries", lambda: all(_records(p) for p in logs.values()), estates, until):
            return 1
        print(f"2. every estate is delivering ({time.monotonic() - started:.1f} s)")
        if not _wait(f"all {TOTAL} messages at every estate", lambda: all(len(_records(p)) >= TOTAL for p in logs.values()),
                     estates, until):
            return 1
        time.sleep(1.5)  # anything delivered twice would land now; and a status file is written
        records = {name: _records(path) for name, path in logs.items()}
        print(f"3. every estate delivered {TOTAL} messages ({time.monotonic() - started:.1f} s); beta's log begins:")
        for record in records["beta"][:6]:
            print(f"     {record['text']:<28} lag {record['lag'] * 1000:7.1f} ms  deps {len(record['deps'])}")
        lags = sorted(r["lag"] for rs in records.values() for r in rs)
        waited = sum(1 for lag in lags if lag > 0)
        print(f"   buffered waiting for deps: {waited} of {len(lags)} deliveries, longest {lags[-1] * 1000:.0f} ms"
              + ("" if waited else " (each relay forwards in the order it stored, deps first, so with every estate"
                                   " following every other a message seldom arrives before its deps)"))
        faults = {key: sum(relay.counts[key] for relay in relays) for key in ("lost", "reordered", "duplicated")}
        print(f"   the chaos relays lost {faults['lost']}, reordered {faults['reordered']}"
              f" and duplicated {faults['duplicated']} datagrams\n")
        from flowcast.house.causalcli import main as causal_cli

        print("$ flowcast causal status houses/causal-gamma.yaml")
        causal_cli(["status", str(root / "houses" / "causal-gamma.yaml")])
        problems = check(records)
        for problem in problems[:20]:
            print(f"flowcast demo causal: FAILED: {problem}", file=sys.stderr)
        ok = not problems
        if ok:
            print(f"\nchecked: each estate delivered all {TOTAL} messages once, every one after all its deps"
                  " (no answer before its post), and all three delivered the same messages")
    finally:
        codes = {name: estates.stop(name) for name in list(estates.processes)}
        for relay in relays:
            relay.close()
        for name, code in codes.items():
            if code not in (0, -signal.SIGTERM) or not ok:
                print(f"\n{name} exited {code}:\n{estates.output(name)[-4000:]}", file=sys.stderr)
    print(f"flowcast demo causal: {'done' if ok else 'failed'}; logs in {run}/causal-*/logs")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
