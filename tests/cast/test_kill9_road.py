"""kill -9 of the cache's house mid-stream, real processes and sockets: every acknowledged publish is
in the cache after the restart and reaches the subscriber exactly once, in order.

The publishing estate abc runs in a child process (tests/cast/estate_child.py)
and prints each id once its publish is acknowledged; this process is the
subscribing estate xyz, with its durable inbox and three subscriptions: the
whole stream, and two receivers splitting it ``mod 2``.  abc is SIGKILLed while it
publishes and xyz receives, then started again on the same cache file: the
renewed subscription resyncs from xyz's cursor and the live stream goes on.
The restarted abc first retries, under the same ids, what its killed
incarnation announced but never saw acknowledged (some of it committed
before the kill): each still reaches xyz once.
Once directly, once through the chaos relay (10% loss, 2% duplication, 5%
reordering), so the resync after the crash is itself lossy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from flowcast.cast import Cache, CastConfig
from flowcast.runtime import RealClock, Scheduler
from flowcast.transport.chaos import ChaosRelay
from tests.cast.realkit import FROM_ABC, manor, run_for, run_until
from tests.cast.realkit import drain as _drain

ROOT = Path(__file__).resolve().parents[2]
AFTER = 1_000_000  # the restarted publisher's numbers start here


class Child:
    """One incarnation of abc: its output lines collected by a thread as they come."""

    def __init__(self, directory: Path, port: int, first: int, count: int, retry: dict[int, bytes] | None = None) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cast.estate_child", str(directory), str(port), str(first), str(count),
             *(f"{n}:{id.hex()}" for n, id in sorted((retry or {}).items()))],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def said(self, word: str) -> bool:
        return word in self.lines

    def published(self, kind: str) -> dict[int, bytes]:
        """``p`` (about to publish) or ``a`` (acknowledged): number -> id."""
        out = {}
        for line in list(self.lines):
            parts = line.split()
            if len(parts) == 3 and parts[0] == kind:
                out[int(parts[1])] = bytes.fromhex(parts[2])
        return out

    def end(self, signum: int) -> str:
        """Send ``signum``, wait for the exit and the last lines; the child's stderr."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signum)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
        self._reader.join(10)
        errors = self.process.stderr.read()
        self.process.stdout.close()
        self.process.stderr.close()
        return errors


#: xyz's subscriptions: the whole stream, and two receivers splitting it ``mod 2`` at the publisher.
SUBSCRIPTIONS = {"inbox": None, "half0": ("id", 2, 0), "half1": ("id", 2, 1)}


def _check(got: list, published: dict[int, bytes]) -> list[int]:
    """Each message once, each one published, in the publisher's order: the numbers delivered."""
    ids = [item["id"] for item in got]
    assert len(ids) == len(set(ids)), "a message reached the application twice"
    by_id = {id: n for n, id in published.items()}
    numbers = []
    for item in got:
        n = by_id.get(item["id"])
        assert n is not None, f"delivered {item['name']} ({item['id'].hex()}), never published"
        assert item["name"] == f"abc/messages/alice/{n}" and item["data"] == b"%08d" % n
        numbers.append(n)
    assert numbers == sorted(numbers)  # the publisher's order, across the kill and the resync
    return numbers


@pytest.mark.parametrize("between", ["direct", "chaos"])
def test_kill_9_of_the_cache_house_mid_stream_loses_no_acknowledged_publish_and_delivers_once(tmp_path, between):
    scheduler = Scheduler(RealClock())
    xyz = manor("xyz", scheduler, tmp_path / "xyz", policy=[FROM_ABC], inbox=True, config=CastConfig())
    relay = None
    if between == "chaos":  # both incarnations of abc reach xyz through the relay: the resync is lossy too
        relay = ChaosRelay(("127.0.0.1", 0), xyz.router.roads["main"].address, loss=0.10, duplicate=0.02, reorder=0.05,
                           delay=(0.0002, 0.002), seed=5).start()
    port = (relay.address if relay is not None else xyz.router.roads["main"].address)[1]
    got: dict[str, list] = {into: [] for into in SUBSCRIPTIONS}

    def drain() -> dict[str, list]:
        for into, items in got.items():
            _drain(xyz.store.queue(into), items)
        return got

    children: list[Child] = []
    try:
        first = Child(tmp_path / "abc", port, 0, 200_000)
        children.append(first)
        assert run_until(scheduler, lambda: first.said("ready") or first.process.poll() is not None, 30), first.lines[-3:]
        assert first.said("ready"), first.end(signal.SIGKILL)
        # a short lease: renewals every second, so the restarted publisher hears from xyz soon
        subs = [xyz.cast.subscribe("abc/messages/**", estate="abc", into=into, split=split, lease=3.0)
                for into, split in SUBSCRIPTIONS.items()]
        assert run_until(scheduler, lambda: len(drain()["inbox"]) >= 500 and len(first.published("a")) >= 2000, 60), \
            ({into: len(items) for into, items in got.items()}, first.lines[-3:])
        assert first.process.poll() is None and not first.said("done")  # mid-stream
        os.killpg(first.process.pid, signal.SIGKILL)  # no close, no flush: the house just ends
        at_kill = len(drain()["inbox"])
        first.end(signal.SIGKILL)
        assert first.process.returncode == -signal.SIGKILL
        acked = first.published("a")
        published = first.published("p")
        assert len(acked) >= 2000 and len(published) < 200_000

        run_for(scheduler, 1.0, drain)  # abc is gone for a while; xyz keeps renewing
        unacked = {n: id for n, id in published.items() if n not in acked}
        second = Child(tmp_path / "abc", port, AFTER, 300, retry=unacked)  # the same cache file; retries first
        children.append(second)
        assert run_until(scheduler, lambda: second.said("done") or second.process.poll() is not None, 30), second.lines[-3:]
        assert second.said("done"), second.end(signal.SIGKILL)
        acked.update(second.published("a"))
        published.update(second.published("p"))
        assert set(second.published("a")) == set(unacked) | set(range(AFTER, AFTER + 300))  # every retry acknowledged
        retried_dups = sum(1 for line in second.lines if line.startswith("dup "))
        wanted = set(acked.values())
        assert wanted == set(published.values())  # after the retries, everything announced is acknowledged

        def arrived() -> bool:
            drain()
            halves = {item["id"] for item in got["half0"] + got["half1"]}
            return wanted <= {item["id"] for item in got["inbox"]} and wanted <= halves

        assert run_until(scheduler, arrived, 60), ({into: len(items) for into, items in got.items()}, len(wanted), subs)
        run_for(scheduler, 1.5, drain)  # anything more (a duplicate) would come now
        errors = second.end(signal.SIGTERM)  # its log may hold routed refusals (a cursor for a lease it never knew)
        assert "Traceback" not in errors and second.process.returncode == 0, errors[-2000:]

        numbers = _check(got["inbox"], published)
        assert numbers[-1] == AFTER + 299 and at_kill < len(numbers)
        assert len(numbers) == len(wanted), (len(numbers), len(wanted), len(unacked), retried_dups)  # each stored once
        halves = [set(_check(got[into], published)) for into in ("half0", "half1")]
        assert halves[0] and halves[1] and not halves[0] & halves[1]  # the split: disjoint...
        assert halves[0] | halves[1] == set(numbers)  # ...and together everything, each once
        assert all(sub.state == "active" and not sub.gaps for sub in subs), subs
        if relay is not None:
            assert relay.counts["lost"] > 5 and relay.counts["duplicated"] + relay.counts["reordered"] > 0, relay.counts

        cache = Cache.open(tmp_path / "abc" / "cache.sqlite3", estate="abc", readonly=True)
        try:
            stored = {bytes(row[0]) for row in cache._reader.execute("SELECT id FROM messages")}
        finally:
            cache.close()
        assert wanted <= stored, "an acknowledged publish is not in the cache after the restart"
    finally:
        for child in children:
            if child.process.poll() is None:
                child.end(signal.SIGKILL)
        xyz.close()
        scheduler.close()
        if relay is not None:
            relay.close()
