"""bench/causal.py's ``causal_fetch_ms`` figure, and what its figures share (what it measures and how: that file's docstring).

Two estate processes, alpha and beta, each a manor with a road on loopback,
a CAST cache and a CausalService; beta fetches the dependencies only alpha
holds, and a plain routed round trip on the same road is timed beside it.

Run alone: ``./dev bench bench/_causalfetch.py [--json] [--quick] [--rounds N]``;
bench/causal.py prints it with the rest.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BenchHouse, ChildHouse, Figures, next_command, parser, run_reported  # noqa: E402

from flowcast.causal.message import TopicMsg, make  # noqa: E402

# -- what causal.py's figures and this one share: the topic, keys, policy and messages ------

TOPIC = "log"
CONTENT = 100
PUBLISHERS = 8


def signing_key(name: str) -> Any:
    """A fixed signing key per name, so runs repeat."""
    from nacl.signing import SigningKey

    return SigningKey(name.encode().ljust(32, b"k")[:32])


def peer_rules(peers: tuple[str, ...]) -> list[dict[str, str]]:
    """The policy of tests/causal/kit.py: peers may fetch (``causal``) and use CAST."""
    out = []
    for peer in peers:
        out += [{"allow": "write", "estate": peer, "share": "cast.*"},
                {"allow": "subscribe", "estate": peer, "share": "cast"},
                {"allow": "causal", "estate": peer, "share": "causal"}]
    return out


def topic_config(owner: bytes, publishers: list[bytes]) -> Any:
    from flowcast.causal.config import TopicConfig

    return TopicConfig.of(TOPIC, owner, publishers)


def signed_chains(count: int, keys: list[Any], *, first_deps: Callable[[int], list[Any]] = lambda p: []) -> list[TopicMsg]:
    """``count`` messages, round robin over ``keys``, each naming its publisher's previous one
    (a publisher's first names ``first_deps(publisher index)``): one chain per key."""
    out: list[TopicMsg] = []
    tips: dict[int, Any] = {}
    content = bytes(range(CONTENT))
    for i in range(count):
        p = i % len(keys)
        deps = [tips[p]] if p in tips else first_deps(p)
        out.append(make(keys[p], TOPIC, content, deps=deps))
        tips[p] = out[-1].id
    return out


# -- the fetch: two estate processes -----------------------------------------------------------

def _house_main(conn: Any, spec: dict[str, Any]) -> None:
    """One estate's manor: serve commands from the parent on ``conn`` until told to stop."""
    run_reported(_estate, conn, spec, spec["estate"])


def _estate(conn: Any, spec: dict[str, Any]) -> None:
    from flowcast.cast import CastConfig, CastService
    from flowcast.cast.cache import Cache
    from flowcast.causal.config import CausalConfig
    from flowcast.causal.service import CausalService
    from flowcast.causal.sync import ACCESS, FETCH_SHARE
    from flowcast.routing import Route
    from flowcast.routing.wiring import join_remote, wire_road, wire_router
    from flowcast.runtime import Event, RealClock, Scheduler, sleep
    from flowcast.store import Store

    estate, peer = spec["estate"], spec["peer"]
    top = Path(spec["dir"])
    scheduler = Scheduler(RealClock())
    store = Store(scheduler.clock.now, name="manor")
    house = BenchHouse(store, scheduler)
    router = wire_router(house, estate=estate, yard="manor", manor="manor", policy=peer_rules((peer,)))
    road = wire_road(house, "main", keep=spec["keep"], acceptance="always")
    cache = Cache.open(top / "cache.sqlite3", estate=estate, clock=scheduler.clock, scheduler=scheduler)
    cast = CastService(router, cache=cache, config=CastConfig())
    topic = topic_config(spec["owner"], spec["publishers"])
    service = CausalService(router, cast, CausalConfig(topics={TOPIC: topic}, peers=(peer,)),
                            state=top / "causal.sqlite3", follow=False)
    state: dict[str, Any] = {"target": None}
    pong = Event()

    def reply(*message: Any) -> None:
        conn.send(message)

    # The plain round trip: the fetch's route, share and permission, no causal work at either end.
    def on_ping(landing: Any) -> None:
        landing.reply({"topic": TOPIC, "msgs": [bytes(landing.data["size"])], "none": []}, tag="bench.pong")

    def on_pong(landing: Any) -> None:
        pong.set()

    router.handle("bench.ping", on_ping, access=ACCESS)
    router.handle("bench.pong", on_pong, access=ACCESS)

    def wait_allowed():  # type: ignore[no-untyped-def]
        end = time.monotonic() + 15
        while not road.is_allowed(peer) and time.monotonic() < end:
            yield sleep(0.01)
        reply("allowed", road.is_allowed(peer))

    def store_all(wires: list[bytes]):  # type: ignore[no-untyped-def]
        for wire in wires:
            outcome = service.relay.accept(wire, "")
            if outcome != "stored":
                reply("error", f"{estate}: the relay refused a message: {outcome}", "")
                return
        end = time.monotonic() + 30
        while len(service.relay.index) < len(wires) and time.monotonic() < end:
            yield sleep(0.002)
        reply("stored", len(service.relay.index))

    def pings(count: int, size: int):  # type: ignore[no-untyped-def]
        out = []
        for _ in range(count):
            pong.clear()
            start = time.perf_counter()
            router.send(Route(FETCH_SHARE, "", peer, ""), {"topic": TOPIC, "want": [bytes(32)], "size": size},
                        src=FETCH_SHARE, tag="bench.ping")
            timer = scheduler.call_later(5.0, pong.set)  # bounded: a lost answer ends the wait
            yield pong.wait()
            elapsed = time.perf_counter() - start
            timer.cancel()
            if elapsed >= 5.0:
                reply("error", f"{estate}: no answer to a ping within 5 s", "")
                return
            out.append(elapsed)
            yield sleep(0.005)
        reply("pinged", out)

    def commits(count: int):  # type: ignore[no-untyped-def]
        out = []
        data = bytes(300)
        for _ in range(count):
            start = time.perf_counter()
            ticket = cache.publish(f"{estate}/bench/commit", data)
            deadline = time.monotonic() + 5
            while not ticket.done and time.monotonic() < deadline:
                yield sleep(0.0002)
            out.append(time.perf_counter() - start)
        reply("committed", out)

    def on_push(share: Any) -> None:
        target = state["target"]
        if target is None:
            share.queue.clear()
            return
        while share.queue:
            if share.queue.popleft()["hash"] == target:
                elapsed = time.perf_counter() - state["start"]
                state["target"] = None
                state["timer"].cancel()
                reply("fetched", elapsed)
                share.queue.clear()
                return

    def overdue() -> None:
        if state["target"] is not None:
            state["target"] = None
            reply("error", f"{estate}: the dependent message was not delivered within 10 s "
                           f"(sync {dict(service.sync.counts)}, relay {dict(service.relay.counts)})", "")

    def on_command() -> None:
        received = next_command(conn, scheduler)
        if received is None:
            return
        command, *args = received
        if command == "join":
            join_remote(house, "main", *args)
            reply("ok")
        elif command == "wait_allowed":
            scheduler.spawn(wait_allowed(), name="wait_allowed")
        elif command == "store":
            scheduler.spawn(store_all(args[0]), name="store")
        elif command == "subscribe":
            service.subscribe(TOPIC, "inbox")
            store.queue("inbox").watchers.append(on_push)
            reply("ok")
        elif command == "fetch":
            wire, target = args
            state["target"] = target
            state["timer"] = scheduler.call_later(10.0, overdue)
            state["start"] = time.perf_counter()
            outcome = service.relay.accept(wire, peer)
            if outcome != "stored":
                state["target"] = None
                state["timer"].cancel()
                reply("error", f"{estate}: the relay refused the dependent message: {outcome}", "")
        elif command == "ping":
            scheduler.spawn(pings(*args), name="pings")
        elif command == "commit":
            scheduler.spawn(commits(*args), name="commits")
        elif command == "status":
            reply("status", service.status())
        elif command == "stop":
            scheduler.stop()
        else:
            reply("error", f"unknown command {command!r}", "")

    scheduler.add_reader(conn, on_command)
    reply("ready", road.address)
    try:
        scheduler.run()
    finally:
        service.close()
        cast.close()
        cache.close()
        house.close()




def fetch_run(rounds: int, pings: int) -> dict[str, Any]:
    """Two estate processes on a loopback road: fetch times, plain round trips, commit times (seconds)."""
    keys = [signing_key("alice")]
    chain = signed_chains(2 * (rounds + 1), keys)  # one publisher: m0 <- m1 <- m2 ...
    topic = (bytes(keys[0].verify_key), [bytes(keys[0].verify_key)])
    top = tempfile.mkdtemp(prefix="flowcast-bench-causal-")
    ctx = multiprocessing.get_context("spawn")
    procs: dict[str, ChildHouse] = {}
    out: dict[str, Any] = {}
    try:
        for estate, peer in (("alpha", "beta"), ("beta", "alpha")):
            os.makedirs(os.path.join(top, estate))
            spec = {"estate": estate, "peer": peer, "dir": os.path.join(top, estate),
                    "keep": os.path.join(top, estate + "-keep"), "owner": topic[0], "publishers": topic[1]}
            procs[estate] = ChildHouse(ctx, _house_main, spec, estate)
        addresses = {name: p.expect("ready", 60) for name, p in procs.items()}
        alpha, beta = procs["alpha"], procs["beta"]
        beta.ask("ok", "join", *addresses["alpha"][:2])
        for name in ("alpha", "beta"):
            if not procs[name].ask("allowed", "wait_allowed", timeout=20):
                raise RuntimeError(f"{name} did not allow its peer")
        alpha.ask("stored", "store", [m.wire for m in chain], timeout=60)
        beta.ask("ok", "subscribe")
        times = []
        for i in range(rounds + 1):  # round 0 warms the path up and is not counted
            dependent = chain[2 * i + 1]
            times.append(beta.ask("fetched", "fetch", dependent.wire, dependent.hash.hex(), timeout=15))
        out["fetch"] = times[1:]
        out["rtt"] = beta.ask("pinged", "ping", pings + 1, len(chain[0].wire), timeout=30)[1:]
        out["commit"] = beta.ask("committed", "commit", max(5, pings // 2), timeout=30)
        status = beta.ask("status", "status")
        out["fetched"] = status["sync"].get("fetched", 0)
        if out["fetched"] != rounds + 1:
            raise RuntimeError(f"beta fetched {out['fetched']} deps in {rounds + 1} rounds")
    except Exception as error:  # noqa: BLE001 - a failed run is a figure of n/a, not a crash
        out["note"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    finally:
        for p in procs.values():
            p.close()
        shutil.rmtree(top, ignore_errors=True)
    return out


def add_fetch_figure(figures: Figures, rounds: int, pings: int) -> None:
    """Measure ``causal_fetch_ms`` (``rounds`` fetches, ``pings`` plain round trips) into ``figures``."""
    run = fetch_run(rounds, pings)
    if "note" in run:
        figures.add("causal_fetch_ms", None, "ms", note=run["note"])
        return
    fetch = statistics.median(run["fetch"]) * 1e3
    rtt = statistics.median(run["rtt"]) * 1e3
    commit = statistics.median(run["commit"]) * 1e3
    figures.add("causal_fetch_ms", fetch, "ms", ratios={"x road rtt": fetch / rtt},
                extra={"road_rtt_ms": rtt, "cache_commit_ms": commit, "fetch_ms": [round(t * 1e3, 3) for t in run["fetch"]]},
                note=f"median of {rounds} rounds, accept at beta to delivery, dep fetched from alpha over loopback UDP; "
                     f"plain routed round trip {rtt:.3f} ms, one cache commit {commit:.3f} ms")


def main(argv: list[str] | None = None) -> int:
    """The fetch figure alone: ``bench/_causalfetch.py [--json] [--quick] [--rounds N]``."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=None, help="fetch rounds over the road (default 20; --quick 3)")
    args = p.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 20)
    figures = Figures("causal_fetch", quick=args.quick, rounds=rounds)
    add_fetch_figure(figures, rounds, 5 if args.quick else 50)
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
