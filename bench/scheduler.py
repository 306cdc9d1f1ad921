"""Micro-thread switch rate of flowcast's scheduler, and house build time.

Why these comparisons: a flowcast house runs every framer and behaviour as a
generator micro-thread, so the cost of one cooperative switch bounds how
many framers a house can run per period.  Two yardsticks bound that cost:

* a bare generator round-robin (``deque.popleft`` / ``next`` / ``append``) --
  the floor nothing built on generators can beat; target: flowcast reaches
  at least 50% of its rate;
* asyncio tasks doing ``await asyncio.sleep(0)`` -- what a user would reach
  for instead; target: flowcast at least 3x faster.

All three run in the same process and invocation, with the same total
number of switches per measurement (so every K runs long enough to time),
best of ``--repeats``.  The scheduler runs on its default real clock, as a
house does.

The second part times building a house with 10,000 framers (target: under
1 s), against ioflo 2.0.3 building the equivalent ``.flo`` (about 14 s).

Run: ``.venv/bin/python bench/scheduler.py [--json] [--quick]``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Figures, best_of, parser, timed  # noqa: E402

from flowcast.runtime.scheduler import Scheduler  # noqa: E402

KS = (1, 100, 1_000, 10_000)


def _worker(n: int):
    """The same body for every contender: ``n`` cooperative switches, then end."""
    for _ in range(n):
        yield


# -- switch rates ---------------------------------------------------------


def run_flowcast(k: int, n: int) -> float:
    """Seconds for ``k`` micro-threads of ``n`` switches each on a fresh Scheduler."""
    scheduler = Scheduler()
    for _ in range(k):
        scheduler.spawn(_worker(n))
    try:
        return timed(scheduler.run)
    finally:
        scheduler.close()


def run_bare(k: int, n: int) -> float:
    """The floor: a deque of generators and nothing else."""
    ready = deque(_worker(n) for _ in range(k))

    def loop() -> None:
        popleft, append = ready.popleft, ready.append
        while ready:
            gen = popleft()
            try:
                next(gen)
            except StopIteration:
                continue
            append(gen)

    return timed(loop)


async def _async_worker(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def run_asyncio(k: int, n: int) -> float:
    """Seconds for ``k`` tasks of ``n`` ``sleep(0)`` each; task creation is not timed."""
    elapsed = 0.0

    async def main() -> None:
        nonlocal elapsed
        tasks = [asyncio.ensure_future(_async_worker(n)) for _ in range(k)]
        start = time.perf_counter()
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start

    loop = asyncio.new_event_loop()
    try:
        timed(lambda: loop.run_until_complete(main()))
    finally:
        loop.close()
    return elapsed


def switch_rates(figures: Figures, total: int, asyncio_total: int, repeats: int) -> None:
    """Add per-K figures: switches per second for each contender, and ratios."""
    for k in KS:
        n = max(1, total // k)
        na = max(1, asyncio_total // k)
        flowcast = k * n / best_of(repeats, lambda: run_flowcast(k, n))
        bare = k * n / best_of(repeats, lambda: run_bare(k, n))
        aio = k * na / best_of(repeats, lambda: run_asyncio(k, na))
        figures.add(
            f"switches.K={k}.flowcast",
            flowcast / 1e6,
            "M/s",
            ratios={"flowcast/bare": flowcast / bare, "flowcast/asyncio": flowcast / aio},
            extra={"switches": k * n, "per_switch_us": 1e6 / flowcast},
        )
        figures.add(f"switches.K={k}.bare", bare / 1e6, "M/s", extra={"switches": k * n, "per_switch_us": 1e6 / bare})
        figures.add(f"switches.K={k}.asyncio", aio / 1e6, "M/s", extra={"switches": k * na, "per_switch_us": 1e6 / aio})


# -- house build ----------------------------------------------------------


def framers_flo(count: int) -> str:
    """FloScript for one house of ``count`` active framers.

    Each framer has two frames and a conditional ``go`` in each, so the
    builder has frames to link, conditions to compile and transitions to
    resolve -- the work a real flow makes it do, ``count`` times over.
    """
    lines = ["house bench", ""]
    for i in range(count):
        lines += [
            f"framer f{i} be active first a{i}",
            f"   frame a{i}",
            f"      go b{i} if elapsed >= 1.0",
            f"   frame b{i}",
            f"      go a{i} if elapsed >= 1.0",
            "",
        ]
    return "\n".join(lines)


def ioflo_build_seconds(text: str) -> float:
    """Seconds ioflo 2.0.3's Skedder takes to build ``text`` from a file."""
    import collections.abc  # noqa: F401 - ioflo 2.0.3 needs it imported first on 3.11

    from ioflo.aid.consoling import getConsole
    from ioflo.base import skedding

    getConsole().reinit(verbosity=getConsole().Wordage.mute)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "framers.flo")
        with open(path, "w") as f:
            f.write(text)
        skedder = skedding.Skedder(name="bench", filepath=path)
        start = time.perf_counter()
        ok = skedder.build()
        elapsed = time.perf_counter() - start
    if not ok:
        raise RuntimeError("ioflo failed to build the generated flow")
    return elapsed


def flowcast_build_seconds(path: str) -> tuple[float, float, int] | None:
    """(parse s, build s, framers) for flowcast building a House from ``path``.

    Timed like ioflo's ``Skedder.build``: from the file on disk to a house
    ready to run (parse, resolve, compile, scheduler and skedder made).
    None if this checkout has no house builder yet.
    """
    try:
        from flowcast.flow.floscript import load_flo
        from flowcast.house.house import House
        from flowcast.runtime.gcpause import gc_paused
    except ImportError:
        return None
    # As flowcast.house.house.load_house does at a house's start: one
    # collector pause over parse and build (freezing is left out so runs
    # stay independent).
    with gc_paused():
        start = time.perf_counter()
        spec = load_flo(path)
        parsed = time.perf_counter()
        house = House(spec.house(), virtual=True, out=lambda line: None)
        built = time.perf_counter()
    house.scheduler.close()
    return parsed - start, built - parsed, len(house.built.framers)


def house_build(figures: Figures, count: int, repeats: int) -> None:
    """Add the build-time figures for ``count`` framers: flowcast (best of ``repeats``) and ioflo (one run)."""
    text = framers_flo(count)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "framers.flo")
        with open(path, "w") as f:
            f.write(text)
        runs = [flowcast_build_seconds(path) for _ in range(max(1, repeats))]
    ioflo_s = ioflo_build_seconds(text)
    name = f"house_build.framers={count}"
    if runs[0] is None:
        figures.add(f"{name}.flowcast", None, "s", note="not available yet: no flowcast.house.House")
    else:
        parse_s, build_s, framers = min(runs, key=lambda r: r[0] + r[1])
        if framers != count:
            raise RuntimeError(f"flowcast built {framers} framers, expected {count}")
        total = parse_s + build_s
        figures.add(
            f"{name}.flowcast",
            total,
            "s",
            ratios={"ioflo/flowcast": ioflo_s / total},
            note=f"parse {parse_s:.3g} s + build {build_s:.3g} s; target < 1 s",
            extra={"parse_s": parse_s, "build_s": build_s},
        )
    figures.add(f"{name}.ioflo", ioflo_s, "s", note="ioflo 2.0.3 Skedder.build, one run")


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--switches", type=int, default=2_000_000, help="switches per measurement (default 2,000,000)")
    p.add_argument(
        "--asyncio-switches",
        type=int,
        default=500_000,
        help="switches per asyncio measurement (default 500,000: ~0.6 s at ~1.2 us each)",
    )
    p.add_argument("--framers", type=int, default=10_000, help="framers in the house-build figure (default 10,000)")
    p.add_argument("--no-house", action="store_true", help="skip the house-build figures")
    args = p.parse_args(argv)
    if args.quick:
        args.switches, args.asyncio_switches, args.framers, args.repeats = 20_000, 20_000, 20, 1
    figures = Figures(
        "bench/scheduler.py",
        switches=args.switches,
        asyncio_switches=args.asyncio_switches,
        repeats=args.repeats,
        framers=args.framers,
        quick=args.quick,
    )
    switch_rates(figures, args.switches, args.asyncio_switches, args.repeats)
    if not args.no_house:
        house_build(figures, args.framers, args.repeats)
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
