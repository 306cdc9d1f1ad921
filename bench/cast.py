"""CAST's cache against NATS JetStream: acknowledged durable publish, replay, bytes on disk.

The yardstick is JetStream (``nats-server -js``, file store, on loopback),
driven from Python by nats-py as a flowcast user would drive it, on the
same work in the same run: 100 B messages.

Figures (``--json`` names):

* ``cast_publish_100B`` -- msgs/s acknowledged as durable by the cache,
  driven from Python as a flow would: ``Cache.publish`` and wait for the
  tickets, ``--window`` in flight (4,000, as nats-py's async publish
  allows).  Each acknowledgement means committed with ``synchronous=FULL``
  (fsync); JetStream's means received (it fsyncs every 2 min by default).
  Ratio ``x jetstream`` against ``peer.jetstream_publish_100B`` (nats-py
  ``publish_async``, 4,000 in flight, no message-id header: JetStream's
  fastest path, so the ratio is conservative).
* ``cast_replay_100B`` -- msgs/s replaying ``--count`` cached messages
  (1,000,000 by default) from seq 0 through ``Cache.read`` (batches of
  2,000 or 1 MiB, the subscriber window), in process.  The figure over a
  road, to a remote subscriber's share, comes from the subscription path
  (``flowcast/cast/publisher.py`` and ``subscriber.py``) once merged: this
  one is the cache's share of it.  Ratio against
  ``peer.jetstream_replay_100B``: the same count to a new durable pull
  consumer, batches of 1,000, one ack (AckAll) per batch.
* ``cast_bytes_per_message`` -- the cache file's size after a checkpoint,
  per message; ``peer.jetstream_bytes_per_message`` is the stream store's.

The peer installs itself where it can: ``nats-server`` from Debian's
packages when missing and this process is root (or has password-less
sudo); ``nats-py`` from the ``bench`` extra (``pip install -e .[bench]``).
A peer that cannot run gives ``n/a`` and the reason; flowcast's figures are
printed regardless.  Every wait is bounded.

Run: ``.venv/bin/python bench/cast.py [--json] [--quick] [--count N]``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Figures, best_of, parser, timed  # noqa: E402

from flowcast.cast import Cache  # noqa: E402

SIZE = 100
PAYLOAD = b"x" * SIZE
NAME = "abc/messages/alice/inbox"


# -- flowcast ----------------------------------------------------------------------


def cast_publish(path: Path, count: int, window: int) -> tuple[float, Cache]:
    """Acknowledged durable publishes per second, ``window`` in flight; returns the open cache."""
    cache = Cache.open(path, estate="abc", max_bytes=1 << 40)
    acked = 0
    publish = cache.publish
    in_flight: list = []

    def body() -> None:
        nonlocal acked, in_flight
        for _ in range(count):
            in_flight.append(publish(NAME, PAYLOAD, publisher="alice"))
            if len(in_flight) >= window:
                cache.wait(30.0)
                still = []
                for ticket in in_flight:
                    if ticket.done:
                        if ticket.error is not None:
                            raise ticket.error
                        acked += 1
                    else:
                        still.append(ticket)
                in_flight = still
        cache.flush(120.0)
        for ticket in in_flight:
            if ticket.error is not None:
                raise ticket.error
            acked += 1

    seconds = timed(body)
    if acked != count:
        raise RuntimeError(f"{acked} of {count} publishes acknowledged")
    return count / seconds, cache


def cast_replay(cache: Cache, count: int) -> float:
    """Messages per second read back from seq 0 in subscriber-sized batches."""
    got = 0

    def body() -> None:
        nonlocal got
        got = 0
        after = 0
        while True:
            batch = cache.read(after, limit=2000, max_bytes=1 << 20)
            if not batch:
                break
            got += len(batch)
            after = batch.upto

    seconds = timed(body)
    if got != count:
        raise RuntimeError(f"replayed {got} of {count}")
    return count / seconds


def cast_bytes(cache: Cache, count: int) -> float:
    cache._writes.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    total = sum(p.stat().st_size for p in cache.path.parent.glob(cache.path.name + "*"))
    return total / count


# -- the peer: NATS JetStream ----------------------------------------------------------


def _nats_server() -> tuple[str | None, str]:
    """The nats-server binary, installing Debian's package if missing and allowed."""
    found = shutil.which("nats-server")
    if found:
        return found, ""
    apt = ["apt-get", "install", "-y", "-q", "nats-server"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command = apt
    elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        command = ["sudo", "-n", *apt]
    else:
        return None, "nats-server is not installed and this process may not install it (apt-get install nats-server)"
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    found = shutil.which("nats-server") or (os.path.exists("/usr/sbin/nats-server") and "/usr/sbin/nats-server")
    if not found:
        return None, f"installing nats-server failed: {proc.stderr.strip()[-200:]}"
    return found, ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NatsServer:
    """``nats-server -js`` on loopback with a temporary store, ended by its pid."""

    def __init__(self, binary: str, store: Path) -> None:
        self.port = _free_port()
        self.store = store
        self.proc = subprocess.Popen(
            [binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(store)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("nats-server did not listen within 20 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


async def _jetstream(port: int, count: int, repeats: int, deadline: float) -> dict[str, float]:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType

    nc = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=0)
    try:
        js = nc.jetstream(publish_async_max_pending=4000, timeout=30)
        await js.add_stream(name="CAST", subjects=["cast.>"], storage=StorageType.FILE, max_age=86400)
        start = time.perf_counter()
        futures = []
        for i in range(count):
            futures.append(await js.publish_async("cast.messages.alice", PAYLOAD))
            if len(futures) >= 8000:
                for f in futures:
                    await f
                futures.clear()
                if time.monotonic() > deadline:
                    raise RuntimeError("JetStream publish overran the bench's deadline")
        await asyncio.wait_for(js.publish_async_completed(), 120)
        for f in futures:
            await f
        publish = count / (time.perf_counter() - start)

        best = 0.0
        for attempt in range(max(1, repeats)):
            sub = await js.pull_subscribe(
                "cast.>", durable=f"replay{attempt}", stream="CAST",
                config=ConsumerConfig(ack_policy=AckPolicy.ALL, max_ack_pending=-1),
            )
            got = 0
            start = time.perf_counter()
            while got < count:
                msgs = await sub.fetch(1000, timeout=10)
                got += len(msgs)
                await msgs[-1].ack()
                if time.monotonic() > deadline:
                    raise RuntimeError("JetStream replay overran the bench's deadline")
            best = max(best, count / (time.perf_counter() - start))
            await sub.unsubscribe()
        return {"publish": publish, "replay": best}
    finally:
        await nc.close()


def jetstream(count: int, repeats: int, budget: float) -> tuple[dict[str, float], str]:
    """JetStream's figures, or ({}, why not)."""
    try:
        import nats  # noqa: F401
    except ImportError:
        return {}, "nats-py is missing: pip install -e .[bench]"
    binary, why = _nats_server()
    if binary is None:
        return {}, why
    store = Path(tempfile.mkdtemp(prefix="flowcast-bench-nats-"))
    server = None
    try:
        server = NatsServer(binary, store)
        figures = asyncio.run(_jetstream(server.port, count, repeats, time.monotonic() + budget))
        size = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
        figures["bytes"] = size / count
        return figures, ""
    except Exception as error:  # noqa: BLE001 - a peer that fails is reported, not fatal
        return {}, f"JetStream failed: {error!r}"[:300]
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(store, ignore_errors=True)


# -- the run -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=None, help="messages published and replayed (default 1,000,000; --quick 5,000)")
    p.add_argument("--window", type=int, default=4000, help="publishes in flight (default 4,000)")
    p.add_argument("--no-peer", action="store_true", help="flowcast's figures only")
    args = p.parse_args(argv)
    count = args.count or (5_000 if args.quick else 1_000_000)
    repeats = 1 if args.quick else args.repeats
    figures = Figures("cast", count=count, window=args.window, size=SIZE, repeats=repeats)

    work = Path(tempfile.mkdtemp(prefix="flowcast-bench-cast-"))
    try:
        publish, cache = cast_publish(work / "cache.sqlite3", count, args.window)
        try:
            replay = 1.0 / best_of(repeats, lambda: 1.0 / cast_replay(cache, count))
            per_message = cast_bytes(cache, count)
        finally:
            cache.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    peer: dict[str, float] = {}
    why = "left out (--no-peer)"
    if not args.no_peer:
        peer, why = jetstream(count, repeats, budget=60.0 if args.quick else 900.0)

    def ratio(ours: float, key: str) -> dict[str, float]:
        return {"x jetstream": ours / peer[key]} if key in peer else {}

    note = "" if peer else f"peer n/a: {why}"
    figures.add("cast_publish_100B", publish, "msgs/s", ratios=ratio(publish, "publish"), note=note,
                extra={"acknowledged": "committed, synchronous=FULL"})
    figures.add("cast_replay_100B", replay, "msgs/s", ratios=ratio(replay, "replay"), note=note,
                extra={"path": "Cache.read in process; the road figure comes from the subscriber path"})
    figures.add("cast_bytes_per_message", per_message, "B", ratios=ratio(per_message, "bytes"))
    if peer:
        figures.add("peer.jetstream_publish_100B", peer["publish"], "msgs/s", note="nats-py publish_async, 4,000 in flight")
        figures.add("peer.jetstream_replay_100B", peer["replay"], "msgs/s", note="new durable pull consumer, fetch 1,000")
        figures.add("peer.jetstream_bytes_per_message", peer["bytes"], "B")
    else:
        figures.add("peer.jetstream_publish_100B", None, "msgs/s", note=why)
        figures.add("peer.jetstream_replay_100B", None, "msgs/s", note=why)
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
