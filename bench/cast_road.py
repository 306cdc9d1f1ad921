"""CAST over a real road: replay to a returning subscriber, the live stream, memory per subscription.

The subscription half of ``bench/cast.py``'s figures: that script runs
this one's :func:`measure` and :func:`add_figures` after its cache figures,
so one command prints them all; this one alone is the quicker way to
look at the road (it borrows ``bench/cast.py``'s JetStream peer).  Two estate
processes on loopback, each one manor house with its own scheduler on a
real clock, wired as the estate launcher wires them (flowcast.routing
.wiring: a road on UDP, acceptance ``always``)::

    abc.manor (SQLite cache, CastService)  --road-->  xyz.manor (CastService, inbox.sqlite3, queue "inbox")

Figures (``--json``: one object):

* ``cast_replay_100B``  msgs/s: ``--replay`` messages of 100 B are in the
  cache (published and durable) before xyz subscribes from cursor 0; the
  figure is messages / (last arrival in xyz's queue share - the subscribe),
  the best of ``--repeats`` subscriptions (each a new one from cursor 0,
  the one before closed; JetStream's replay is the best of as many new
  consumers).  Each arrival went through the inbox's exactly-once commit.  Reference in
  the same run: ``x cache read`` (the same messages read in-process from
  the cache, the bound a road cannot beat) and ``x jetstream``: the same
  count replayed by JetStream to a new durable consumer in the same run
  (``peer.jetstream_replay_100B``, the peer of ``bench/cast.py``, used
  from there; left out with the reason when that script or nats-server is
  not there, or with ``--no-peer``).
* ``cast_live_100B``  msgs/s: xyz subscribed, abc publishes ``--live``
  messages as fast as its tickets come back (at most 4,096 in flight);
  messages / (last arrival - first publish).
* ``cast_live_p50_us`` / ``cast_live_p99_us``  publish call to arrival in
  xyz's queue share, at ``--rate`` messages/s offered for ``--seconds``
  (``time.monotonic`` is one clock for both processes).
* ``cast_bytes_per_subscription``  bytes the publisher holds per active
  subscription (tracemalloc over 500 subscriptions of one remote, on the
  simulated network in this process).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BenchHouse, ChildHouse, Figures, next_command, parser, run_reported  # noqa: E402

PAYLOAD = 100
_stamp = struct.Struct(">d")


def _house_main(conn: Any, spec: dict[str, Any]) -> None:
    """One house: serve commands from the parent on ``conn`` until told to stop."""
    run_reported(_house, conn, spec, spec["estate"])


def _house(conn: Any, spec: dict[str, Any]) -> None:
    from flowcast.cast import CastConfig, CastService
    from flowcast.routing.wiring import join_remote, wire_road, wire_router
    from flowcast.runtime import Event, RealClock, Scheduler, sleep
    from flowcast.store import Store

    estate = spec["estate"]
    scheduler = Scheduler(RealClock())
    store = Store(scheduler.clock.now, name="manor")
    house = BenchHouse(store, scheduler)
    router = wire_router(house, estate=estate, yard="manor", manor="manor", policy=spec["policy"])
    road = wire_road(house, "main", keep=spec["keep"], acceptance="always")
    config = CastConfig(subscribers={"xyz": ("abc/**",)})
    cache = None
    if estate == "abc":
        from flowcast.cast.cache import Cache

        cache = Cache.open(os.path.join(spec["dir"], "cache.sqlite3"), estate="abc", clock=scheduler.clock, scheduler=scheduler)
        cast = CastService(router, cache=cache, config=config)
    else:
        cast = CastService(router, config=config, inbox=os.path.join(spec["dir"], "inbox.sqlite3"))
    state: dict[str, Any] = {"got": 0, "last": None, "lat": []}
    payload = os.urandom(PAYLOAD - 8)

    def reply(*message: Any) -> None:
        conn.send(message)

    def wait_allowed(peer: str):  # type: ignore[no-untyped-def]
        end = time.monotonic() + 10
        while not road.is_allowed(peer) and time.monotonic() < end:
            yield sleep(0.01)
        reply("allowed", road.is_allowed(peer))

    def publish(count: int, rate: float, reply_as: str, prefix: str = "m"):  # type: ignore[no-untyped-def]
        """``count`` messages under ``abc/<prefix>/``, paced at ``rate``/s (0: as fast as tickets return)."""
        pending: list = []
        start = time.monotonic()
        for i in range(count):
            if rate:
                due = start + i / rate
                if due > time.monotonic():
                    yield sleep(due - time.monotonic())
            data = _stamp.pack(time.monotonic()) + payload
            pending.append(cast.publish(f"abc/{prefix}/{i % 64}", data, publisher="alice"))
            if len(pending) >= 4096 or (not rate and i % 512 == 511):
                while pending and not pending[0].done:
                    yield sleep(0.0005)
                pending = [t for t in pending if not t.done]
        while any(not t.done for t in pending):
            yield sleep(0.001)
        reply(reply_as, {"start": start, "end": time.monotonic()})

    def receiver(into: str):  # type: ignore[no-untyped-def]
        inbox = store.queue(into)
        queue = inbox.queue
        wake = Event()
        inbox.watchers.append(lambda share: wake.set())
        lat = state["lat"]
        unpack = _stamp.unpack_from
        while True:
            yield wake.wait()
            wake.clear()
            if not queue:
                continue
            now = time.monotonic()
            if state["timing"]:
                lat.extend(now - unpack(item["data"])[0] for item in queue)
            state["got"] += len(queue)
            state["last"] = now
            queue.clear()
            store.end_turn()  # the flow's turn ended: what it took is acknowledged (ack="turn")

    def read_all(count: int) -> float:
        start = time.perf_counter()
        after, n = 0, 0
        while n < count:
            read = cache.read(after, limit=1000, max_bytes=1 << 20)
            if not read:
                break
            n += len(read)
            after = read.upto
        return n / (time.perf_counter() - start)

    def on_command() -> None:
        received = next_command(conn, scheduler)
        if received is None:
            return
        command, *args = received
        if command == "wait_allowed":
            scheduler.spawn(wait_allowed(*args), name="wait_allowed")
        elif command == "join":
            join_remote(house, "main", *args)
            reply("ok")
        elif command == "publish":
            scheduler.spawn(publish(*args), name="publish")
        elif command == "read_all":
            reply("read", read_all(*args))
        elif command == "subscribe":
            # A fresh subscription from cursor 0 into queue ``into`` (a new sid: the whole
            # cache again); the one before it is closed, so only the last one takes the live stream.
            state["timing"], into, *mode = args
            if state.get("sub") is not None:
                state["sub"].close()
            state["got"] = 0
            scheduler.spawn(receiver(into), name=f"receiver {into}")
            start = time.monotonic()
            state["sub"] = cast.subscribe("abc/**", estate="abc", into=into, ack=mode[0] if mode else "turn")
            reply("subscribed", start)
        elif command == "live":
            # Both live subscriptions at once, one per mode, each on its own names: rounds can
            # alternate the modes without a new subscription replaying the cache in between.
            if state.get("sub") is not None:
                state["sub"].close()
                state["sub"] = None
            state["timing"], state["got"] = False, 0
            for mode in ("turn", "none"):
                into = f"live_{mode}"
                scheduler.spawn(receiver(into), name=f"receiver {into}")
                cast.subscribe(f"abc/{mode[0]}/**", estate="abc", into=into, ack=mode)
            reply("live")
        elif command == "cpu":
            reply("cpu", time.process_time())
        elif command == "timing":
            state["timing"], state["lat"][:] = args[0], []
            reply("ok")
        elif command == "progress":
            reply("progress", {"got": state["got"], "last": state["last"]})
        elif command == "latency":
            reply("latency", list(state["lat"]))
        elif command == "stop":
            scheduler.stop()
        else:
            reply("error", f"unknown command {command!r}", "")

    scheduler.add_reader(conn, on_command)
    reply("ready", road.address)
    profile = os.environ.get("FLOWCAST_BENCH_PROFILE")
    try:
        if profile and estate == "xyz":
            import cProfile

            cProfile.runctx("scheduler.run()", globals(), {"scheduler": scheduler}, f"{profile}.{estate}")
        else:
            scheduler.run()
    finally:
        cast.close()
        if cache is not None:
            cache.close()
        house.close()




def _wait_for(proc: ChildHouse, count: int, limit: float) -> dict[str, Any]:
    end = time.monotonic() + limit
    progress = proc.ask("progress", "progress")
    while progress["got"] < count and time.monotonic() < end:
        time.sleep(0.02)
        progress = proc.ask("progress", "progress")
    return progress


def road_run(replay: int, live: int, rate: float, seconds: float, repeats: int = 1) -> dict[str, Any]:
    top = tempfile.mkdtemp(prefix="fccast-")
    ctx = multiprocessing.get_context("spawn")
    procs: dict[str, ChildHouse] = {}
    policies = {"abc": [{"allow": "subscribe", "estate": "xyz", "share": "cast"}],
                "xyz": [{"allow": "write", "estate": "abc", "share": "cast.*"}]}
    out: dict[str, Any] = {}
    try:
        for estate in ("abc", "xyz"):
            os.makedirs(os.path.join(top, estate))
            spec = {"estate": estate, "policy": policies[estate], "dir": os.path.join(top, estate),
                    "keep": os.path.join(top, estate + "-keep")}
            procs[estate] = ChildHouse(ctx, _house_main, spec, estate)
        addresses = {name: p.expect("ready", 30) for name, p in procs.items()}
        procs["xyz"].ask("ok", "join", *addresses["abc"][:2])
        for name, peer in (("abc", "xyz"), ("xyz", "abc")):
            if not procs[name].ask("allowed", "wait_allowed", peer, timeout=15):
                raise RuntimeError(f"{name} did not allow {peer}")
        abc, xyz = procs["abc"], procs["xyz"]
        abc.send("publish", replay, 0.0, "filled")
        abc.expect("filled", 60 + replay / 5_000)
        out["read"] = abc.ask("read", "read_all", replay, timeout=120)
        # Best of ``repeats`` replays, as JetStream's replay is the best of as many consumers.
        for round_ in range(repeats):
            start = xyz.ask("subscribed", "subscribe", False, f"inbox{round_}")
            progress = _wait_for(xyz, replay, 60 + replay / 2_000)
            if progress["got"] != replay:
                raise RuntimeError(f"replay: {progress['got']:,} of {replay:,} arrived")
            out["replay"] = max(out.get("replay", 0.0), replay / (progress["last"] - start))
        # The live stream and the paced latency, with acknowledged processing (ack="turn", the
        # default) and at most once (ack="none", the path it replaced), in the same run: both
        # subscriptions open, ``rounds`` rounds alternating which mode goes first, each figure
        # the median over rounds with the per-round ratios' spread (a machine shared with other
        # work loads both modes alike, and no round is picked).
        xyz.ask("live", "live")
        held = 0
        paced = int(rate * seconds)
        rounds: dict[str, dict[str, list[float]]] = {m: {"live": [], "cpu_us": [], "p50": [], "p99": []} for m in ("turn", "none")}
        for round_ in range(max(1, repeats)):
            for mode in ("turn", "none") if round_ % 2 == 0 else ("none", "turn"):
                got = rounds[mode]
                xyz.ask("ok", "timing", False)
                cpu = xyz.ask("cpu", "cpu")
                abc.send("publish", live, 0.0, "published", mode[0])
                sent = abc.expect("published", 60 + live / 2_000)
                progress = _wait_for(xyz, held + live, 60)
                if progress["got"] != held + live:
                    raise RuntimeError(f"live ({mode}): {progress['got'] - held:,} of {live:,} arrived")
                got["live"].append(live / (progress["last"] - sent["start"]))
                got["cpu_us"].append((xyz.ask("cpu", "cpu") - cpu) / live * 1e6)
                held += live
                xyz.ask("ok", "timing", True)
                abc.send("publish", paced, rate, "paced", mode[0])
                abc.expect("paced", seconds + 60)
                _wait_for(xyz, held + paced, 60)
                lat = sorted(xyz.ask("latency", "latency"))
                if len(lat) != paced:
                    raise RuntimeError(f"paced ({mode}): {len(lat):,} of {paced:,} arrived")
                got["p50"].append(statistics.median(lat) * 1e6)
                got["p99"].append(lat[int(len(lat) * 0.99) - 1] * 1e6)
                held += paced
        for mode, suffix in (("turn", ""), ("none", "_none")):
            for key, values in rounds[mode].items():
                out[key + suffix] = statistics.median(values)
                out[key + suffix + "_runs"] = values
        out["rounds"] = max(1, repeats)
        out["offered"] = paced / seconds
    except Exception as error:  # noqa: BLE001 - a failed run is a figure of n/a, not a crash
        out["note"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    finally:
        for p in procs.values():
            p.close()
        shutil.rmtree(top, ignore_errors=True)
    return out


def bytes_per_subscription(n: int = 500) -> float:
    """The publisher's memory per active subscription, on the simulated network."""
    import tracemalloc

    from flowcast.cast import CastConfig, CastService
    from flowcast.routing import Policy, Router
    from flowcast.runtime import Scheduler, VirtualClock
    from flowcast.store import Store

    class _Empty:  # the cache as an empty one: a subscription's cost is not the messages'
        high_seq, low_seq = 0, 1

        def read(self, *a: Any, **k: Any) -> list:
            return []

    scheduler = Scheduler(VirtualClock())
    store = Store(scheduler.clock.now, name="manor")
    router = Router(store, estate="abc", yard="manor", policy=Policy(), scheduler=scheduler)
    cast = CastService(router, cache=_Empty(), config=CastConfig(subscribers={"xyz": ("abc/**",)}, max_subs=n + 1))
    # Answers go nowhere: what is measured is what the publisher holds, not a router's notes of sends that failed.
    router.answer = router.send = lambda *args, **kwargs: True  # type: ignore[method-assign]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    from flowcast.routing.handlers import Landing
    from flowcast.routing.pair import Pair
    from flowcast.routing.route import Route

    for i in range(n):
        src = Route(f"cast.s{i:032x}", "bob", "xyz", "main")
        pair = Pair(src, Route("cast", "manor", "abc", "main"))
        data = {"sid": i.to_bytes(16, "big"), "pattern": f"abc/m/{i}/**", "cursor": 0, "lease": 60.0}
        cast.publisher._on_sub(Landing(router, pair, "cast.sub", 0.0, None, data, True, store.get("cast")))
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(cast.publisher.subs) == n
    return grown / n


def jetstream_replay(count: int, repeats: int = 1) -> tuple[float | None, str]:
    """JetStream's replay of ``count`` 100 B messages, best of ``repeats`` new durable consumers, through bench/cast.py's peer."""
    try:
        import cast as castbench  # bench/cast.py: the JetStream peer lives there
        start_peer = castbench._start_peer
    except (ImportError, AttributeError) as error:
        return None, f"no JetStream peer (bench/cast.py: {error})"
    peer, why = start_peer(900.0)
    if peer is None:
        return None, why
    server, client = peer
    try:
        client.publish("ROAD", count)
        return max(client.replay("ROAD", count, f"road{r}") for r in range(repeats)), ""
    except Exception as error:  # noqa: BLE001 - a peer that fails is reported, not fatal
        return None, f"JetStream failed: {error!r}"[:300]
    finally:
        client.close()
        server.stop()


def measure(replay: int, live: int, rate: float, seconds: float, subscriptions: int, repeats: int = 1) -> dict[str, Any]:
    """The road run and the memory per subscription, as one dict (``note`` when the road run failed)."""
    try:
        import flowcast.cast.cache  # noqa: F401
    except ImportError:
        run: dict[str, Any] = {"note": "needs the SQLite cache (flowcast.cast.cache)"}
    else:
        run = road_run(replay, live, rate, seconds, repeats)
    run["per_subscription"] = bytes_per_subscription(subscriptions)
    return run


def add_figures(figures: Figures, run: dict[str, Any], replay: int, live: int, theirs: float | None, why: str) -> None:
    """The road's figures in the order and under the names of the issue (bench/cast.py prints the same)."""
    note = run.get("note", "")
    ours = run.get("replay")
    ratios = {"x cache read": ours / run["read"]} if ours else {}
    if ours and theirs:
        ratios["x jetstream"] = ours / theirs
    figures.add("cast_replay_100B", ours, "msgs/s", ratios=ratios, extra={"cache_read": run.get("read")},
                note=note or f"{replay:,} cached messages to a returning subscriber over a loopback road; in-process cache read {run['read']:,.0f} msgs/s"
                + ("" if theirs else f"; peer n/a: {why}"))
    def vs_none(key: str) -> dict[str, float]:
        ours, theirs = run.get(key), run.get(key + "_none")
        return {"x ack none": ours / theirs} if ours and theirs else {}

    def spread(key: str) -> str:
        """The per-round ratios' range: each round measured both modes back to back."""
        pairs = list(zip(run.get(key + "_runs", []), run.get(key + "_none_runs", [])))
        ratios = [a / b for a, b in pairs if b]
        return f"; median of {len(pairs)} rounds, per-round ratio {min(ratios):.2f}-{max(ratios):.2f}" if ratios else ""

    figures.add("cast_live_100B", run.get("live"), "msgs/s", ratios=vs_none("live"),
                note=note or f"{live:,} published while subscribed, publish to arrival, acknowledged when the flow's turn ends{spread('live')}")
    figures.add("cast_live_cpu_us", run.get("cpu_us"), "us", ratios=vs_none("cpu_us"),
                note=note or f"the subscribing process's CPU per live message, acknowledged processing{spread('cpu_us')}")
    for name, key in (("cast_live_p50_us", "p50"), ("cast_live_p99_us", "p99")):
        figures.add(name, run.get(key), "us", ratios=vs_none(key),
                    note=note or f"publish to arrival at {run['offered']:,.0f} msgs/s offered{spread(key)}")
    figures.add("cast_live_none_100B", run.get("live_none"), "msgs/s", note=note or "the same with ack=none (at most once across a crash)")
    figures.add("cast_live_none_cpu_us", run.get("cpu_us_none"), "us", note=note or "CPU per live message, ack=none")
    for name, key in (("cast_live_none_p50_us", "p50_none"), ("cast_live_none_p99_us", "p99_none")):
        figures.add(name, run.get(key), "us", note=note or "publish to arrival, ack=none")
    figures.add("cast_bytes_per_subscription", run["per_subscription"], "B", note="publisher memory per active subscription (tracemalloc)")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--no-peer", action="store_true", help="flowcast's figures only")
    p.add_argument("--replay", type=int, default=1_000_000)
    p.add_argument("--live", type=int, default=100_000)
    p.add_argument("--rate", type=float, default=10_000.0)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    if args.quick:
        args.replay, args.live, args.rate, args.seconds = 2_000, 2_000, 2_000.0, 0.5
    figures = Figures("cast_road", quick=args.quick, replay=args.replay, live=args.live, rate=args.rate, seconds=args.seconds)
    run = measure(args.replay, args.live, args.rate, args.seconds, 50 if args.quick else 500, 1 if args.quick else args.repeats)
    theirs, why = (None, "left out (--no-peer)") if args.no_peer else jetstream_replay(args.replay, 1 if args.quick else args.repeats)
    add_figures(figures, run, args.replay, args.live, theirs, why)
    figures.add("peer.jetstream_replay_100B", theirs, "msgs/s",
                note=why or f"{args.replay:,} messages to a new durable pull consumer, batches of 1,000, one AckAll each")
    figures.emit(args.json)


if __name__ == "__main__":
    main()
