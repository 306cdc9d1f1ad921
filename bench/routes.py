"""Routing benchmark: routed share-to-share throughput, and a hub's memory per remote estate and per route.

Figures (one line each; ``--json`` prints one object instead):

* ``routed_100B``  share-to-share msgs/s, 100-byte payloads, two estates of
  two houses each, four processes on loopback::

      alpha.w1 --lane--> alpha.manor --road--> beta.manor --lane--> beta.w1
      (sender)                                            (QueueShare "inbox")

  sent as ``route send`` sends a queue it drains: ``router.send_many`` of
  each burst, so the hops in between carry batch parcels
  (flowcast.routing.batch) and the receiver's queue gets every message.
  Target >= 150,000 msgs/s (issue 15).  Ratios: ``x target`` (value /
  150,000) and ``x direct road`` (value / ``road_100B`` of the same run).
* ``routed_100B_single``  the same path with one ``router.send`` per
  message (one parcel each): what a flow that sends message by message
  gets, and ``x batched``, what batching buys.
* ``road_100B``  the direct road in the same run: RoadStack to RoadStack,
  100 B one way between two processes, measured by ``bench/_stackbench.py``
  exactly as ``bench/road.py`` does.  routed / direct is what routing costs
  (three more hops' worth of processes, the router at four houses).
* ``hub_bytes_per_remote_N``  bytes a hub estate holds per idle remote
  estate (joined, allowed, heartbeating) between the previous size and N;
  goal < 10 KiB, ratio ``x goal`` (value / 10,240).
* ``hub_setup_N``  wall seconds to bring the remotes from the previous size
  up to N (joined and allowed both ways) on the simulated network.
* ``hub_idle_cpu_N``  CPU seconds the hub's road stack spends per (virtual)
  second with N idle remotes, i.e. cores; the note splits it into wakes per
  second x CPU per wake.  Above 1 the hub could not keep up in real time.
* ``hub_bytes_per_route_in`` / ``_out``  bytes the hub holds per distinct
  (src, dst) route after one message on each of ``--routes`` routes came in
  from remotes (landing in a hub queue share, then drained) / went out from
  hub shares to remote shares (all acknowledged).
* ``world_bytes_per_remote_N``  the tracemalloc cross-check (below).

How the routed figure is taken.  Each house is a spawned process with its
own ``Scheduler(RealClock())``, Store and Router, wired by
``flowcast.routing.wiring`` on a minimal stand-in house (lane on ``UxdPort``
in a per-estate runtime directory; the manors also a road on ``UdpPort``
with a Keep directory, acceptance ``always``; each manor's policy allows the
other estate to write).  The sender's micro-thread calls
``router.send_many("inbox@w1.beta", [payload] * burst, src="out")`` (or, for
the single figure, ``router.send`` per message) in bursts, bounded by a
credit window: the receiver routes its running count back
(``credit@w1.alpha``, the same four hops the other way) every
``--credit-every`` messages, and the sender stays at most ``--window``
messages ahead of the last credit -- so no queue along the path grows
without bound.  The figure is messages / (last arrival at the receiver -
first send); ``time.monotonic`` is one clock for every process.  The cyclic
GC is off in every process while measuring, as in ``_stackbench``.  The
note gives each process's CPU per message and the rate that CPU allows on
idle cores, min(cores / sum, 1 / max): four busy processes share the
machine's cores, so other load on the machine shows in the rate, not in
the CPU figures.  ``--profile DIR`` leaves a cProfile of each house.

How the memory figures are taken, and why this way: bench/_hubmemory.py.

Run: ``./dev bench bench/routes.py [--json] [--quick] [--count N]
[--remotes 100,300,1000] [--routes 1000] [--check 50,150]
[--only throughput|memory] [--profile DIR]``.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import BenchHouse, ChildHouse, Figures, next_command, parser, run_reported  # noqa: E402
from _hubmemory import add_figures as add_memory_figures, add_options as add_memory_options, settings as memory_settings  # noqa: E402

TARGET_MSGS = 150_000
PAYLOAD = 100


# -- routed throughput: four house processes ------------------------------------------


def _house_main(conn: Any, spec: dict[str, Any]) -> None:
    """One house: serve commands from the parent on ``conn`` until told to stop."""
    run_reported(_house, conn, spec, f"{spec['estate']}.{spec['yard']}")


def _house(conn: Any, spec: dict[str, Any]) -> None:
    from flowcast.runtime import Event, RealClock, Scheduler, sleep
    from flowcast.runtime.spin import budget_for
    from flowcast.routing.wiring import join_remote, wire_lane, wire_road, wire_router
    from flowcast.store import Store

    estate, yard = spec["estate"], spec["yard"]
    scheduler = Scheduler(RealClock())
    scheduler.spin.budget = budget_for(4)  # as an estate's house would: four houses share this host
    store = Store(scheduler.clock.now, name=yard)
    house = BenchHouse(store, scheduler)
    router = wire_router(house, estate=estate, yard=yard, manor="manor", policy=spec["policy"])
    from flowcast.transport.lanekeys import LaneKeys

    # Authenticated as in an estate: each house derives only its own pair keys.
    keys = LaneKeys.derive(spec["lane_secret"], yard, ["manor", "w1"])
    lane = wire_lane(house, spec["lanedir"], ["manor", "w1"], keys=keys)
    road = None
    if yard == "manor":
        road = wire_road(house, "main", keep=spec["keep"], acceptance="always")
    state: dict[str, Any] = {"cpu0": time.process_time()}

    def reply(*message: Any) -> None:
        conn.send(message)

    def wait_allowed(peer: str, limit: float):  # type: ignore[no-untyped-def]
        end = time.monotonic() + limit
        while not road.is_allowed(peer) and time.monotonic() < end:
            yield sleep(0.01)
        reply("allowed", road.is_allowed(peer))

    def sender(count: int, window: int, burst: int, budget: float, batched: bool):  # type: ignore[no-untyped-def]
        credit = store.share("credit")
        errors = store.queue("out")
        wake = Event()
        credit.watchers.append(lambda share: wake.set())
        payload = os.urandom(spec["payload"])
        send, send_many = router.send, router.send_many
        dst = "inbox@w1.beta"
        sent = refused = 0
        start = time.monotonic()
        stop = start + budget
        while sent < count:
            limit = min(count, (credit.value or 0) + window)
            if sent >= limit:
                if time.monotonic() > stop:
                    break
                wake.clear()
                yield wake.wait()
                continue
            n = min(burst, limit - sent)
            if batched:  # as 'route send' draining a queue of n messages does
                refused += n - send_many(dst, [payload] * n, src="out")
            else:
                for _ in range(n):
                    if not send(dst, payload, src="out"):
                        refused += 1
            sent += n
            if time.monotonic() > stop:
                break
            yield
        state["sent"] = {"sent": sent, "start": start, "refused": refused, "errors": len(errors.queue)}
        reply("sent", state["sent"])

    def receiver(every: int):  # type: ignore[no-untyped-def]
        inbox = store.queue("inbox")
        queue = inbox.queue
        wake = Event()
        inbox.watchers.append(lambda share: wake.set() if not wake._flag else None)
        got = credited = 0
        state["got"], state["last"] = 0, None
        while True:
            yield wake.wait()
            wake.clear()
            n = len(queue)
            if not n:
                continue
            queue.clear()  # taken: the consumer's share of the work is this
            got += n
            state["got"], state["last"] = got, time.monotonic()
            if got - credited >= every:
                credited = got
                router.send("credit@w1.alpha", got, src="credits", tag="credit")

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
        elif command == "mark":
            gc.collect()
            state["cpu0"] = time.process_time()
            reply("ok")
        elif command == "send":
            scheduler.spawn(sender(*args), name="sender")
        elif command == "receive":
            scheduler.spawn(receiver(*args), name="receiver")
            reply("ok")
        elif command == "progress":
            reply("progress", {"got": state.get("got", 0), "last": state.get("last")})
        elif command == "report":
            counts = {f"router.{k}": v for k, v in router.counts.items()}
            counts.update({f"lane.{k}": v for k, v in lane.counts.items()})
            if road is not None:
                counts.update({f"road.{k}": v for k, v in road.counts.items()})
                try:
                    counts["road.resent"] = road.remote("beta" if estate == "alpha" else "alpha").session.link.counts["resent"]
                except (KeyError, AttributeError):
                    pass
            reply("report", {"cpu": time.process_time() - state["cpu0"], "counts": counts})
        elif command == "stop":
            # What is still in flight fails as the stacks close: not news.
            logging.getLogger("flowcast.routing").setLevel(logging.CRITICAL)
            scheduler.stop()
        else:
            reply("error", f"unknown command {command!r}", "")

    scheduler.add_reader(conn, on_command)
    reply("ready", None if road is None else road.address)
    profile = None
    if spec.get("profile"):
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    try:
        scheduler.run()
    finally:
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.path.join(spec["profile"], f"{estate}.{yard}.prof"))
        house.close()




def routed(count: int, budget: float, window: int, every: int, burst: int, batched: bool, profile: str | None = None) -> dict[str, Any]:
    """One routed-throughput run; ``msgs`` is None (with a note) if it failed."""
    top = tempfile.mkdtemp(prefix="fcroutes-")
    ctx = multiprocessing.get_context("spawn")
    procs: dict[str, ChildHouse] = {}
    policies = {"alpha": [{"allow": "write", "estate": "beta"}], "beta": [{"allow": "write", "estate": "alpha"}]}
    from flowcast.transport.lanekeys import new_secret

    secrets = {"alpha": new_secret(), "beta": new_secret()}
    try:
        for estate in ("alpha", "beta"):
            for yard in ("manor", "w1"):
                spec = {
                    "lane_secret": secrets[estate],
                    "estate": estate,
                    "yard": yard,
                    "policy": policies[estate],
                    "lanedir": os.path.join(top, f"{estate}-lane"),
                    "keep": os.path.join(top, f"{estate}-keep"),
                    "payload": PAYLOAD,
                    "profile": profile,
                }
                procs[f"{estate}.{yard}"] = ChildHouse(ctx, _house_main, spec, f"{estate}.{yard}", timeout=10.0)
        addresses = {name: p.expect("ready", 30) for name, p in procs.items()}
        host, port = addresses["beta.manor"][:2]
        procs["alpha.manor"].ask("ok", "join", host, port)
        for name, peer in (("alpha.manor", "beta"), ("beta.manor", "alpha")):
            if not procs[name].ask("allowed", "wait_allowed", peer, 10.0, timeout=15):
                raise RuntimeError(f"{name} did not allow {peer} within 10 s")
        procs["beta.w1"].ask("ok", "receive", every)
        for p in procs.values():
            p.ask("ok", "mark")
        procs["alpha.w1"].send("send", count, window, burst, budget, batched)
        sent = procs["alpha.w1"].expect("sent", budget + 30)
        end = time.monotonic() + 30
        progress = {"got": 0, "last": None}
        while time.monotonic() < end:
            progress = procs["beta.w1"].ask("progress", "progress")
            if progress["got"] >= sent["sent"]:
                break
            time.sleep(0.02)
        reports = {name: p.ask("report", "report") for name, p in procs.items()}
    except Exception as error:  # noqa: BLE001 - a failed run is a figure of n/a, not a crash
        return {"msgs": None, "note": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
    finally:
        for p in procs.values():
            p.close()
        shutil.rmtree(top, ignore_errors=True)
    got, n = progress["got"], sent["sent"]
    if got != n or progress["last"] is None:
        return {"msgs": None, "note": f"receiver got {got:,} of {n:,}", "reports": reports}
    elapsed = progress["last"] - sent["start"]
    cpu = {name: r["cpu"] * 1e6 / n for name, r in reports.items()}
    note = f"{n:,} msgs in {elapsed:.2f} s; CPU us/msg " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
    total = sum(cpu.values())
    cores = os.cpu_count() or 1
    bound = min(cores / total, 1 / max(cpu.values())) * 1e6
    note += f" (sum {total:.1f}: on {cores} idle cores at most {bound:,.0f} msgs/s)"
    lost = sent["refused"] + sent["errors"]
    if lost:
        note += f"; {lost} refused or errored"
    counts = {name: {k: v for k, v in r["counts"].items() if v} for name, r in reports.items()}
    return {"msgs": n / elapsed, "note": note, "cpu_us_per_msg": cpu, "cpu_bound": bound, "counts": counts}


def _commit() -> str | None:
    """The checkout measured (``+`` if flowcast/ has changes not committed): figures move with the code."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "flowcast"], cwd=root, capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+" if dirty else "")) or None


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.set_defaults(repeats=1)
    p.add_argument("--count", type=int, default=None, help="routed messages per run (default 1,000,000 batched, at most 300,000 single; quick 3,000)")
    p.add_argument("--window", type=int, default=8192, help="messages the sender may be ahead of the last credit")
    p.add_argument("--credit-every", type=int, default=1024, help="the receiver routes a credit back every this many")
    p.add_argument("--burst", type=int, default=256, help="sends per micro-thread step")
    add_memory_options(p)
    p.add_argument("--only", choices=("throughput", "memory"), default=None)
    p.add_argument("--profile", default=None, metavar="DIR", help="cProfile each house of the routed run into DIR/<estate>.<yard>.prof")
    args = p.parse_args(argv)
    quick = args.quick
    count = args.count or (3_000 if quick else 1_000_000)
    budget = 2.0 if quick else 20.0
    memory = memory_settings(args)
    figures = Figures("routes", commit=_commit(), quick=quick, repeats=args.repeats, count=count, window=args.window, credit_every=args.credit_every, remotes=memory["sizes"], routes=memory["routes"])

    if args.only != "memory":
        from _stackbench import best, measure

        run = lambda: routed(count, budget, args.window, args.credit_every, args.burst, True, args.profile)  # noqa: E731
        result = best(args.repeats, run, "msgs")
        single = best(args.repeats, lambda: routed(min(count, 300_000), budget, args.window, args.credit_every, args.burst, False), "msgs")
        direct = best(args.repeats, lambda: measure("road", "stream", PAYLOAD, 20_000 if quick else 2_000_000, 0.3 if quick else 2.0), "msgs")
        value, road = result.get("msgs"), direct.get("msgs")
        ratios = {}
        if value:
            ratios["x target"] = value / TARGET_MSGS
            if road:
                ratios["x direct road"] = value / road
        figures.add("routed_100B", value, "msgs/s", ratios=ratios, note=result.get("note", ""),
                    extra={k: result[k] for k in ("cpu_us_per_msg", "cpu_bound", "counts") if k in result})
        figures.add("road_100B", road, "msgs/s", note=direct.get("note", ""))
        value = single.get("msgs")
        figures.add("routed_100B_single", value, "msgs/s", ratios={"x batched": value / result["msgs"]} if value and result.get("msgs") else {},
                    note=single.get("note", ""), extra={k: single[k] for k in ("cpu_us_per_msg", "cpu_bound") if k in single})

    if args.only != "throughput":
        add_memory_figures(figures, **memory)
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
