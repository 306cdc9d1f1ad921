"""CAST's cache against NATS JetStream: acknowledged durable publish, replay, bytes on disk.

The yardstick is JetStream (``nats-server -js``, file store, on loopback),
driven from Python by nats-py as a flowcast user would drive it, on the
same work in the same run: 100 B messages.

Figures (``--json`` names):

* ``cast_publish_100B`` -- msgs/s acknowledged as durable by the cache,
  driven from Python as a flow would: ``Cache.publish`` and wait for the
  tickets, ``--window`` in flight (4,000, as nats-py's async publish
  allows), ``--publish-count`` messages (200,000) into a fresh cache; best
  of ``--repeats`` rounds that alternate with JetStream's, so a machine
  shared with other work loads both alike.  Each acknowledgement means committed with ``synchronous=FULL``
  (fsync); JetStream's means received (it fsyncs every 2 min by default).
  Ratio ``x jetstream`` against ``peer.jetstream_publish_100B`` (nats-py
  ``publish_async``, 4,000 in flight, no message-id header: JetStream's
  fastest path, so the ratio is conservative).
* ``cast_replay_100B`` -- msgs/s replaying ``--count`` cached messages
  (1,000,000 by default) to a returning subscriber over a loopback road:
  two estate processes, the subscriber's inbox committing each delivery
  (``bench/cast_road.py``, run from here after the peer has stopped), best
  of ``--repeats`` new subscriptions as the peer's is of as many consumers.
  Ratio against ``peer.jetstream_replay_100B``: the same count to a new
  durable pull consumer, batches of 1,000, one ack (AckAll) per batch.
* ``cast_replay_cache_100B`` -- the cache's share of that: the same count
  read from seq 0 through ``Cache.read`` in process (batches of 2,000 or
  1 MiB, the subscriber window), with the same peer ratio.
* ``cast_live_100B``, ``cast_live_p50_us``, ``cast_live_p99_us`` -- the
  live stream over the same road: ``--live`` messages published as fast
  as tickets return, then publish-to-arrival latency at ``--rate`` msgs/s
  offered for ``--seconds`` (``bench/cast_road.py``'s docstring).
* ``cast_bytes_per_message`` -- the cache file's size after a checkpoint,
  per message; ``peer.jetstream_bytes_per_message`` is the stream store's.
* ``cast_bytes_per_subscription`` -- the publisher's memory per active
  subscription (tracemalloc over 500 on the simulated network).
* ``cast_live_cpu_us`` and the ``cast_live_*`` lines carry ``x ack none``:
  the same stream with acknowledged processing (``ack: turn``, the
  default) against at most once (``ack: none``), alternating rounds.
* ``stop_idle_s``, ``stop_road_traffic_s``, ``stop_dead_peer_s`` -- the
  stop time with drain, median of ``--repeats`` stops (``bench/stop.py``).

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

import cast_road  # noqa: E402
import stop  # noqa: E402
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


class JetStream:
    """A nats-py client of one JetStream server, driven on one event loop, every wait bounded."""

    def __init__(self, port: int, budget: float) -> None:
        import nats

        self.deadline = time.monotonic() + budget
        self.loop = asyncio.new_event_loop()
        self.nc = self._run(nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=0))
        self.js = self.nc.jetstream(publish_async_max_pending=4000, timeout=30)

    def _run(self, coroutine: Any) -> Any:
        left = self.deadline - time.monotonic()
        if left <= 0:
            coroutine.close()
            raise RuntimeError("JetStream overran the bench's time budget")
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, left))

    def publish(self, stream: str, count: int) -> float:
        """Acknowledged publishes per second into a new file-stored stream, 4,000 in flight."""
        return self._run(self._publish(stream, count))

    async def _publish(self, stream: str, count: int) -> float:
        from nats.js.api import StorageType

        subject = f"{stream.lower()}.messages.alice"
        await self.js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], storage=StorageType.FILE, max_age=86400)
        publish_async = self.js.publish_async
        start = time.perf_counter()
        futures = []
        for _ in range(count):
            futures.append(await publish_async(subject, PAYLOAD))
            if len(futures) >= 8000:
                for f in futures:
                    await f
                futures.clear()
        await self.js.publish_async_completed()
        for f in futures:
            await f
        return count / (time.perf_counter() - start)

    def replay(self, stream: str, count: int, durable: str) -> float:
        """A new durable pull consumer reads the stream: batches of 1,000, one AckAll per batch."""
        return self._run(self._replay(stream, count, durable))

    async def _replay(self, stream: str, count: int, durable: str) -> float:
        from nats.js.api import AckPolicy, ConsumerConfig

        sub = await self.js.pull_subscribe(
            f"{stream.lower()}.>", durable=durable, stream=stream,
            config=ConsumerConfig(ack_policy=AckPolicy.ALL, max_ack_pending=-1),
        )
        got = 0
        start = time.perf_counter()
        while got < count:
            msgs = await sub.fetch(1000, timeout=10)
            got += len(msgs)
            await msgs[-1].ack()
        seconds = time.perf_counter() - start
        await sub.unsubscribe()
        return count / seconds

    def delete(self, stream: str) -> None:
        self._run(self.js.delete_stream(stream))

    def close(self) -> None:
        try:
            self.loop.run_until_complete(asyncio.wait_for(self.nc.close(), 10))
        except Exception:  # noqa: BLE001 - closing a client that failed
            pass
        self.loop.close()


def _start_peer(budget: float) -> tuple[Any, str]:
    """(server, client) of JetStream, or (None, why not)."""
    try:
        import nats  # noqa: F401
    except ImportError:
        return None, "nats-py is missing: pip install -e .[bench]"
    binary, why = _nats_server()
    if binary is None:
        return None, why
    store = Path(tempfile.mkdtemp(prefix="flowcast-bench-nats-"))
    server = None
    try:
        server = NatsServer(binary, store)
        return (server, JetStream(server.port, budget)), ""
    except Exception as error:  # noqa: BLE001 - a peer that fails is reported, not fatal
        if server is not None:
            server.stop()
        shutil.rmtree(store, ignore_errors=True)
        return None, f"JetStream failed to start: {error!r}"[:300]


# -- the run -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=None,
                   help="messages cached and replayed (default 1,000,000; --quick 5,000)")
    p.add_argument("--publish-count", type=int, default=None,
                   help="messages per publish round (default 200,000; --quick: --count)")
    p.add_argument("--window", type=int, default=4000, help="publishes in flight (default 4,000)")
    p.add_argument("--no-peer", action="store_true", help="flowcast's figures only")
    p.add_argument("--live", type=int, default=None, help="messages of the live stream (default 100,000; --quick 2,000)")
    p.add_argument("--rate", type=float, default=None, help="msgs/s offered for the latency (default 10,000; --quick 2,000)")
    p.add_argument("--seconds", type=float, default=None, help="seconds of the paced stream (default 3; --quick 0.5)")
    args = p.parse_args(argv)
    count = args.count or (5_000 if args.quick else 1_000_000)
    per_round = args.publish_count or (count if args.quick else 200_000)
    repeats = 1 if args.quick else args.repeats
    live = args.live or (2_000 if args.quick else 100_000)
    offered = args.rate or (2_000.0 if args.quick else 10_000.0)
    seconds = args.seconds or (0.5 if args.quick else 3.0)
    figures = Figures("cast", count=count, publish_count=per_round, window=args.window, size=SIZE, repeats=repeats,
                      live=live, rate=offered, seconds=seconds, load_average_before=round(os.getloadavg()[0], 2))

    peer, why = (None, "left out (--no-peer)") if args.no_peer else _start_peer(60.0 if args.quick else 900.0)
    server, client = peer if peer is not None else (None, None)
    ours: dict[str, float] = {}
    theirs: dict[str, float] = {}
    work = Path(tempfile.mkdtemp(prefix="flowcast-bench-cast-"))
    try:
        # Publish: rounds alternate between flowcast and JetStream, each into a
        # fresh store, so both see the same load on a shared machine; best of each.
        for round_ in range(repeats):
            rate, cache = cast_publish(work / f"publish{round_}.sqlite3", per_round, args.window)
            cache.close()
            ours["publish"] = max(ours.get("publish", 0.0), rate)
            if client is not None:
                try:
                    rate = client.publish(f"P{round_}", per_round)
                    client.delete(f"P{round_}")
                    theirs["publish"] = max(theirs.get("publish", 0.0), rate)
                except Exception as error:  # noqa: BLE001 - reported, not fatal
                    why, client = f"JetStream failed: {error!r}"[:300], None
        # Replay: ``count`` messages cached, then read back from the start.
        _, cache = cast_publish(work / "replay.sqlite3", count, args.window)
        try:
            ours["replay"] = 1.0 / best_of(repeats, lambda: 1.0 / cast_replay(cache, count))
            ours["bytes"] = cast_bytes(cache, count)
        finally:
            cache.close()
        if client is not None:
            try:
                client.publish("REPLAY", count)
                theirs["replay"] = max(client.replay("REPLAY", count, f"replay{r}") for r in range(repeats))
                theirs["bytes"] = sum(f.stat().st_size for f in server.store.rglob("*") if f.is_file()) / count
            except Exception as error:  # noqa: BLE001 - reported, not fatal
                why = f"JetStream failed: {error!r}"[:300]
    finally:
        if client is not None:
            client.close()
        if server is not None:
            server.stop()
            shutil.rmtree(server.store, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    # The road: two estate processes, after the peer stopped, so neither part loads the other.
    road = cast_road.measure(count, live, offered, seconds, 50 if args.quick else 500, repeats)

    def ratio(key: str) -> dict[str, float]:
        return {"x jetstream": ours[key] / theirs[key]} if key in theirs else {}

    def note(key: str) -> str:
        return "" if key in theirs else f"peer n/a: {why}"

    figures.add("cast_publish_100B", ours["publish"], "msgs/s", ratios=ratio("publish"), note=note("publish"),
                extra={"acknowledged": "committed, synchronous=FULL"})
    cast_road.add_figures(figures, road, count, live, theirs.get("replay"), why)
    figures.add("cast_replay_cache_100B", ours["replay"], "msgs/s", ratios=ratio("replay"), note=note("replay"),
                extra={"path": "Cache.read in process, the same count: the cache's share of cast_replay_100B"})
    figures.add("cast_bytes_per_message", ours["bytes"], "B", ratios=ratio("bytes"))
    figures.add("peer.jetstream_publish_100B", theirs.get("publish"), "msgs/s",
                note="nats-py publish_async, 4,000 in flight" if "publish" in theirs else why)
    figures.add("peer.jetstream_replay_100B", theirs.get("replay"), "msgs/s",
                note="new durable pull consumer, fetch 1,000" if "replay" in theirs else why)
    figures.add("peer.jetstream_bytes_per_message", theirs.get("bytes"), "B", note="" if "bytes" in theirs else why)
    # The stop time with drain (bench/stop.py): idle, with a routed stream in flight, and with the
    # receiving estate frozen so the drain is waited out and what stayed in flight reported.
    stop.add_figures(figures, ("idle",) if args.quick else ("idle", "road", "dead"), repeats)
    # Every figure here moves with what else the machine runs: say how loaded it was.
    figures.settings["load_average_after"] = round(os.getloadavg()[0], 2)
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
