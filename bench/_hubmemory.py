"""A hub estate's memory per idle remote estate and per route, and its idle CPU (bench/routes.py's memory figures).

Run alone: ``./dev bench bench/_hubmemory.py [--json] [--quick] [--remotes 100,300,1000] [--routes N] [--check 50,150]``;
bench/routes.py prints them with its throughput figures.

How the memory figures are taken, and why this way.  The hub and its
remotes share one process -- the simulated network (``SimNetwork`` on a
``VirtualClock``, as ``tests/routing/kit.py``) runs in one, and 1,000
remotes would not fit in processes of their own -- so a process-wide total
cannot say whose memory it is.  The hub's share is found by ownership:

1. *Attribution by reachability.*  From the hub's roots (its Router, which
   holds its Store, Policy, caches and RoadStack, which holds its Keep,
   remotes, sessions, links and port) every object reachable through
   ``gc.get_referents`` is collected without crossing into the shared world
   (scheduler, network, clock, modules, classes, code, function globals,
   enum members) or into a remote's stack; the same is done from the
   remotes' stacks.  The hub's bytes are ``sys.getsizeof`` summed over
   objects reachable from the hub and from no remote.  Two things
   ``getsizeof`` misses are added: the inline attribute arrays of CPython
   3.11 instances (8 bytes a slot plus a header) and buffers that cffi
   allocates with plain malloc (each session's seal/open scratch buffer):
   neither ``getsizeof`` nor tracemalloc sees those; the note says how much
   of the figure they are.
2. *A tracemalloc cross-check*, in a separate hub (``--check`` sizes):
   tracemalloc's growth of the whole process per remote added, against
   (hub + remote side) per remote from the walk, Python-allocated bytes
   only.  ``walk/traced`` near 1 says the walk misses nothing big; the rest
   is the network's and scheduler's per-remote entries and allocator
   rounding.  It runs apart because tracemalloc slows this pure-Python code
   up to twentyfold, which would make the setup and CPU figures meaningless.

Per-remote figures are slopes, (bytes(N) - bytes(previous N)) / (N -
previous N), with the hub alone as N = 0, so fixed costs drop out.  The
remotes of each step come up one by one over one virtual second (so their
1-second heartbeats are spread out, as they drift apart on a real network),
and each reading is taken after ``--idle`` virtual seconds of heartbeats.
Per-route figures run on a hub of their own with 20 remotes (per-route state
does not depend on the number of remotes): the hub's growth across R routes
/ R, once every message was delivered, acknowledged and its queue drained.
"""

from __future__ import annotations

import argparse
import ctypes
import enum
import gc
import os
import sys
import time
import tracemalloc
import types
from typing import Any

GOAL_BYTES = 10 * 1024  # the goal for a hub's memory per idle remote estate
PAYLOAD = 100  # bytes of each message routed in the per-route figures, as routes.py's

# -- memory: a hub and its remotes on the simulated network ------------------------------

_BARRIER_TYPES = (type, types.ModuleType, types.CodeType, types.BuiltinFunctionType, enum.Enum, types.FrameType)
_MANAGED_DICT = 1 << 4  # Py_TPFLAGS_MANAGED_DICT (3.11: attributes in an inline values array)
_PTR = ctypes.sizeof(ctypes.c_void_p)


def _inline_values(obj: Any, referents: int) -> int:
    """Bytes of a 3.11 instance's inline attribute array, which getsizeof leaves out."""
    kind = type(obj)
    if sys.version_info[:2] != (3, 11) or not kind.__flags__ & _MANAGED_DICT:
        return 0
    values = ctypes.c_void_p.from_address(id(obj) - 4 * _PTR).value  # _PyObject_ValuesPointer
    if not values:
        return 0  # the dict is materialised: it is a referent, counted on its own
    slots = max(referents - 1, 0)  # the referents were the type and the values
    return 2 * _PTR + slots * _PTR


def _reach(roots: list[Any], barrier: set[int]) -> dict[int, Any]:
    """Objects reachable from ``roots`` without entering ``barrier`` or shared kinds."""
    seen: dict[int, Any] = {}
    todo = list(roots)
    get_referents = gc.get_referents
    while todo:
        obj = todo.pop()
        key = id(obj)
        if key in seen or key in barrier or isinstance(obj, _BARRIER_TYPES):
            continue
        seen[key] = obj
        if isinstance(obj, types.FunctionType):  # its closure and defaults, not its code or globals
            todo.extend(x for x in (obj.__closure__, obj.__defaults__, obj.__kwdefaults__) if x)
        elif isinstance(obj, types.MethodType):
            todo.append(obj.__self__)
        else:
            todo.extend(get_referents(obj))
    return seen


def _native(obj: Any) -> int:
    """Bytes a cffi array holds outside Python's allocator (neither getsizeof nor tracemalloc sees them)."""
    global _FFI
    if type(obj).__name__ != "__CDataOwn":
        return 0
    if _FFI is None:
        import _cffi_backend

        _FFI = _cffi_backend.FFI()
    try:
        return _FFI.sizeof(obj)
    except Exception:  # noqa: BLE001 - not an array: nothing of its own outside
        return 0


_FFI: Any = None


def _size(objects: dict[int, Any]) -> tuple[int, int]:
    """(bytes in Python's allocator, bytes malloc'd by C libraries) of ``objects``."""
    total = native = 0
    getsizeof = sys.getsizeof
    for obj in objects.values():
        total += getsizeof(obj)
        flags = type(obj).__flags__
        if flags & _MANAGED_DICT:
            total += _inline_values(obj, len(gc.get_referents(obj)))
        elif not flags & (1 << 9):  # not a heap type: C extension objects such as cffi arrays
            native += _native(obj)
    return total, native


class _Hub:
    """A hub estate (Router + RoadStack) and remote estates joining it, on virtual time."""

    def __init__(self, seed: int = 1) -> None:
        from flowcast.routing import Policy, Router
        from flowcast.runtime import Scheduler, VirtualClock
        from flowcast.store import Store
        from flowcast.transport.keep import Keep
        from flowcast.transport.ports.sim import SimNetwork
        from flowcast.transport.road import RoadStack

        self.scheduler = Scheduler(VirtualClock())
        self.net = SimNetwork(self.scheduler, seed=seed)
        store = Store(self.scheduler.clock.now, name="manor")
        self.router = Router(store, estate="hub", yard="manor", policy=Policy([{"allow": "write"}]))
        keep = Keep(None)
        keep.ensure_local("hub")
        self.road = RoadStack(self.net.port("hub"), keep, policy="always", scheduler=self.scheduler)
        self.router.attach_road("main", self.road)
        self.inbox = store.queue("inbox")
        self.remotes: list[Any] = []
        self._RoadStack, self._Keep = RoadStack, Keep
        self.run_for(1.0)

    def run_for(self, seconds: float) -> None:
        clock = self.scheduler.clock
        target = clock.now() + seconds
        self.scheduler.run(until=target)
        clock.advance_to(target)

    def run_until(self, predicate: Any, limit: float, step: float = 0.05) -> bool:
        clock = self.scheduler.clock
        end = clock.now() + limit
        while clock.now() < end:
            if predicate():
                return True
            self.run_for(min(step, end - clock.now()))
        return predicate()

    def grow(self, n: int, limit: float = 300.0, spread: float = 1.0) -> None:
        """Add remotes ``r<i>`` until there are ``n``, all allowed both ways."""
        fresh = []
        step = spread / max(1, n - len(self.remotes))
        for i in range(len(self.remotes), n):
            keep = self._Keep(None)
            keep.ensure_local(f"r{i}")
            road = self._RoadStack(self.net.port(f"r{i}"), keep, policy="always", scheduler=self.scheduler)
            road.join("hub")
            self.remotes.append(road)
            fresh.append(road)
            # Estates come up one by one over ``spread`` virtual seconds, so
            # their heartbeats (every alive_interval, 1 s) do not all fall
            # at one instant -- as on a real network, where they drift apart.
            self.run_for(step)
        hub = self.road
        ok = self.run_until(lambda: all(r.is_allowed("hub") and hub.is_allowed(r.local.name) for r in fresh), limit, 0.25)
        if not ok:
            missing = sum(1 for r in fresh if not (r.is_allowed("hub") and hub.is_allowed(r.local.name)))
            raise RuntimeError(f"{missing} of {len(fresh)} remotes not allowed after {limit:.0f} virtual s")

    def hub_bytes(self) -> dict[str, int]:
        """Hub-only and remote-only bytes by reachability; see the module docstring.

        ``hub``/``remote`` include C-allocated buffers (``*_native``, which
        tracemalloc cannot see); ``*_python`` is what tracemalloc can.
        """
        gc.collect()
        barrier = {id(self.scheduler), id(self.net), id(self.scheduler.clock), id(self)}
        remote_side = _reach(list(self.remotes), barrier | {id(self.router), id(self.road)})
        hub_side = _reach([self.router, self.road], barrier | {id(r) for r in self.remotes})
        for key in remote_side.keys() & hub_side.keys():
            del hub_side[key]
        hub_python, hub_native = _size(hub_side)
        remote_python, remote_native = _size(remote_side)
        return {
            "hub": hub_python + hub_native,
            "hub_python": hub_python,
            "hub_native": hub_native,
            "remote": remote_python + remote_native,
            "remote_python": remote_python,
        }

    def idle(self, seconds: float) -> tuple[float, float]:
        """Run ``seconds`` of idle virtual time: (hub CPU s, hub stack wakes) per virtual second.

        Counts what the hub's stack micro-thread does each wake (``service``
        and arming its timer); the remotes' and the network's work is not in it.
        """
        road = self.road
        spent = [0.0, 0]
        service, arm = road.service, road._arm_timer

        def timed_service() -> None:
            start = time.process_time()
            service()
            spent[0] += time.process_time() - start
            spent[1] += 1

        def timed_arm() -> None:
            start = time.process_time()
            arm()
            spent[0] += time.process_time() - start

        road.service, road._arm_timer = timed_service, timed_arm
        try:
            self.run_for(seconds)
        finally:
            del road.service, road._arm_timer
        return spent[0] / seconds, spent[1] / seconds

    def idle_service_us(self, rounds: int = 200) -> float:
        """CPU of a wake with nothing to do: what every wake pays, whatever it brings."""
        road = self.road
        road.service()  # whatever was due is done: the rounds below find nothing
        start = time.process_time()
        for _ in range(rounds):
            road.service()
            road.next_deadline()  # the stack's micro-thread arms its timer after each service
        return (time.process_time() - start) * 1e6 / rounds


def memory(sizes: list[int], idle: float) -> dict[str, Any]:
    """Hub bytes per remote (by reachability), setup times and idle CPU, growing one hub.

    No tracemalloc here: it slows this pure-Python code up to twentyfold,
    which would make setup times and CPU figures meaningless.
    """
    out: dict[str, Any] = {}
    hub = _Hub()
    last_n, last = 0, hub.hub_bytes()
    out["alone"] = last
    out["sizes"] = {}
    for n in sizes:
        start = time.perf_counter()
        hub.grow(n)
        setup = time.perf_counter() - start
        cpu, wakes = hub.idle(idle)
        now = hub.hub_bytes()
        added = n - last_n
        out["sizes"][n] = {
            "hub_per_remote": (now["hub"] - last["hub"]) / added,
            "native_per_remote": (now["hub_native"] - last["hub_native"]) / added,
            "remote_per_remote": (now["remote"] - last["remote"]) / added,
            "hub_total": now["hub"],
            "setup": setup,
            "idle_cpu": cpu,
            "idle_wakes": wakes,
            "idle_service_us": hub.idle_service_us(),
        }
        last_n, last = n, now
    return out


def per_route(remotes: int, routes: int, idle: float) -> dict[str, Any]:
    """Hub bytes per distinct route: one message on each of ``routes`` routes, in and then out.

    A hub of its own with a few remotes: per-route state does not depend on
    how many remotes there are, and a small world runs in moments.
    """
    from flowcast.routing import Route
    from flowcast.routing.parcel import pack_message

    hub = _Hub()
    hub.grow(remotes)
    hub.idle(idle)
    peers = hub.remotes
    payload = os.urandom(PAYLOAD)
    out: dict[str, Any] = {}
    before = hub.hub_bytes()["hub"]
    for i in range(routes):
        road = peers[i % len(peers)]
        src, dst = Route(f"o{i}", "manor", road.local.name, "main"), Route("inbox", "manor", "hub", "main")
        road.send_bytes(pack_message(src, dst, "", 0.0, payload), "hub", stream=i & 0xFFFF)
    ok = hub.run_until(lambda: len(hub.inbox.queue) >= routes, 60)
    hub.inbox.drain()
    hub.run_until(lambda: not any(r.pending() for r in peers), 30)
    hub.run_for(idle)
    after = hub.hub_bytes()["hub"]
    out["in"] = {"per_route": (after - before) / routes if ok else None, "tracked": len(hub.router.routes)}
    before = after
    for i in range(routes):
        hub.router.send(f"in{i}@.{peers[i % len(peers)].local.name}", payload, src=f"s{i}")
    ok = hub.run_until(lambda: not hub.road.pending(), 60)
    for road in peers:
        road.receive_many()
    hub.run_for(idle)
    after = hub.hub_bytes()["hub"]
    out["out"] = {"per_route": (after - before) / routes if ok else None, "tracked": len(hub.router.routes)}
    out["router_counts"] = {k: v for k, v in hub.router.counts.items() if v}
    return out


def cross_check(sizes: list[int], idle: float) -> dict[int, dict[str, float]]:
    """The walk against tracemalloc: per remote added, (hub + remotes by walk) / traced growth.

    Only what Python's allocator hands out on both sides (cffi's own
    buffers are invisible to tracemalloc, so they are left out of the walk too).
    """
    tracemalloc.start()
    try:
        hub = _Hub()
        last_n, last = 0, hub.hub_bytes()
        last_traced = tracemalloc.get_traced_memory()[0]
        out = {}
        for n in sizes:
            hub.grow(n)
            hub.run_for(idle)
            now = hub.hub_bytes()
            traced = tracemalloc.get_traced_memory()[0]
            added = n - last_n
            hub_part = (now["hub_python"] - last["hub_python"]) / added
            walk = hub_part + (now["remote_python"] - last["remote_python"]) / added
            out[n] = {"world_per_remote": (traced - last_traced) / added, "walk_per_remote": walk, "hub_per_remote": hub_part}
            last_n, last, last_traced = n, now, traced
        return out
    finally:
        tracemalloc.stop()


# -- the script ----------------------------------------------------------------------------


# -- the figures, for routes.py and for a run of this module alone --------------------------------


def add_options(p: argparse.ArgumentParser) -> None:
    """The memory figures' options (routes.py has them too)."""
    p.add_argument("--remotes", default=None, help="comma-separated remote counts (default 100,300,1000; quick 5,10)")
    p.add_argument("--routes", type=int, default=None, help="distinct routes for the per-route figures (default 1000)")
    p.add_argument("--idle", type=float, default=1.0, help="idle virtual seconds before each memory reading (default 1: one heartbeat)")
    p.add_argument("--check", default=None, help="remote counts for the tracemalloc cross-check (default 50,150; quick 5,10; 0 skips)")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The memory figures' sizes from the parsed options."""
    quick = args.quick
    return {
        "sizes": [int(x) for x in (args.remotes or ("5,10" if quick else "100,300,1000")).split(",")],
        "routes": args.routes or (20 if quick else 1000),
        "check_sizes": [int(x) for x in (args.check or ("5,10" if quick else "50,150")).split(",") if int(x) > 0],
        "idle": args.idle,
        "route_remotes": 5 if quick else 20,
    }


def add_figures(figures: Any, sizes: list[int], routes: int, check_sizes: list[int], idle: float, route_remotes: int) -> None:
    """Measure the hub's memory, setup and idle CPU figures into ``figures``."""
    try:
        mem = memory(sizes, idle)
        route = per_route(route_remotes, routes, idle)
        check = cross_check(check_sizes, idle) if check_sizes else {}
    except Exception as error:  # noqa: BLE001 - a failed run is a figure of n/a
        note = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        for n in sizes:
            figures.add(f"hub_bytes_per_remote_{n}", None, "B", note=note)
        mem = None
    if mem is not None:
        figures.add("hub_bytes_alone", mem["alone"]["hub"], "B", note="the hub's Router + RoadStack with no remote")
        previous = 0
        for n, m in mem["sizes"].items():
            value = m["hub_per_remote"]
            figures.add(
                f"hub_bytes_per_remote_{n}",
                value,
                "B",
                ratios={"x goal": value / GOAL_BYTES},
                note=(
                    f"remotes {previous + 1}..{n}; {m['native_per_remote']:.0f} B of it malloc'd by cffi; "
                    f"hub total {m['hub_total'] / 1024:.0f} KiB; each remote's own side {m['remote_per_remote']:.0f} B"
                ),
            )
            figures.add(f"hub_setup_{n}", m["setup"], "s", note=f"wall time to join and allow remotes {previous + 1}..{n} (simulated network, one process)")
            figures.add(
                f"hub_idle_cpu_{n}",
                m["idle_cpu"],
                "cores",
                note=(
                    f"hub stack CPU s per virtual s, {n} idle remotes: {m['idle_wakes']:.0f} wakes/s x "
                    f"{m['idle_cpu'] / max(m['idle_wakes'], 1) * 1e6:.0f} us; an empty wake (service + next_deadline) {m['idle_service_us']:.0f} us"
                ),
            )
            previous = n
        for way in ("in", "out"):
            r = route[way]
            where = "from remotes into a hub share" if way == "in" else "from hub shares to remote shares"
            figures.add(
                f"hub_bytes_per_route_{way}",
                r["per_route"],
                "B",
                note=f"{routes} distinct routes {where}, over {route_remotes} remotes; router tracks {r['tracked']} routes",
            )
        previous = 0
        for n, c in check.items():
            world = c["world_per_remote"]
            figures.add(
                f"world_bytes_per_remote_{n}",
                world,
                "B",
                ratios={"walk/traced": c["walk_per_remote"] / world} if world else {},
                note=f"tracemalloc growth of the process per remote added ({previous + 1}..{n}); by walk: hub {c['hub_per_remote']:.0f} B + remote side {c['walk_per_remote'] - c['hub_per_remote']:.0f} B",
            )
            previous = n


def main(argv: list[str] | None = None) -> int:
    """The memory figures alone: ``bench/_hubmemory.py [--json] [--quick] [--remotes ...] [--routes N] [--check ...]``."""
    from _common import Figures, parser

    p = parser(__doc__.splitlines()[0])
    add_options(p)
    args = p.parse_args(argv)
    chosen = settings(args)
    figures = Figures("hub_memory", quick=args.quick, remotes=chosen["sizes"], routes=chosen["routes"])
    add_figures(figures, **chosen)
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
