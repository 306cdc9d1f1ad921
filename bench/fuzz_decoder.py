"""Fuzz the live stacks: 100,000 inputs round five targets, reach, escapes, time and memory per input.

Targets (``tests/fuzzkit.py``, shared with the short run in
``tests/transport/test_fuzz_live.py``), fed in turn:

* ``decoders``: ``wire.unpack_header``/``decode_chunks``, a bare reliable
  ``Link``, the handshake parsers (join, join reply, hello, initiate);
* ``road``: mutated datagrams (60% of them handshakes) into a live
  ``RoadStack`` from 32 source addresses;
* ``session``: hostile plaintext sealed with the live session's keys, so it
  opens and meets the reliable layer and the message decoder (a fifth of
  them the other way, into the initiator);
* ``lane``: acknowledged-lane datagrams from the other yard's address (both
  ways) into keyed lanes (as an estate's): three quarters hostile and
  sealed with the real pair key and live boot ids (so they reach the
  link), a quarter impostors (no trailer, a wrong or reflected key, a
  replay, a flipped bit), each of which must be one counted drop;
* ``router``: routed parcels, header and data, into both routers from the
  road and the lane.

Virtual time advances 1 ms per input (the scheduler runs the stacks'
timers and traffic every 50 inputs), so the handshake token buckets
refill.  The baseline in the same run is the old fuzzer's regime: frozen
clock, one source address, no memory tracing; the reach figures give the
ratio to it.  Memory is measured with tracemalloc (peak allocation while
one input runs, bytes still held after it, growth over the run).  Exit
status 1 if anything escaped, a stack counted an internal error, a lane
impostor was not one counted drop, or the road and lane no longer deliver
afterwards.

Run: ``.venv/bin/python bench/fuzz_decoder.py [--inputs N] [--seed S] [--json] [--quick]``.
"""

from __future__ import annotations

import logging
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _common import Figures, parser  # noqa: E402

from tests import fuzzkit  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--inputs", type=int, default=100_000, help="inputs per regime (default 100,000)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    inputs = 2_000 if args.quick else args.inputs
    figures = Figures("bench/fuzz_decoder.py", inputs=inputs, seed=args.seed, quick=args.quick)
    # Hostile input is counted by the stacks and reported below; their
    # rate-limited warnings would only interleave with the figures.
    # Restored after: a test runs this main in its own process, where later tests read those warnings.
    logger = logging.getLogger("flowcast")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        frozen = fuzzkit.Fuzzer(fuzzkit.build_world(), seed=args.seed, advance=0.0, sources=1, memory=False).run(inputs)
        world = fuzzkit.build_world()
        report = fuzzkit.Fuzzer(world, seed=args.seed).run(inputs)
        alive = fuzzkit.still_works(world)
    finally:
        logger.setLevel(level)

    total = sum(report.inputs.values())
    figures.add("inputs", total, "inputs", note=f"{report.seconds:.1f} s, {report.virtual_seconds:.0f} s virtual")
    for target in fuzzkit.TARGETS:
        figures.add(f"inputs.{target}", report.inputs[target], "inputs")
    for handler in fuzzkit.HANDLERS:
        after, before = report.reach[handler], frozen.reach[handler]
        figures.add(f"reach.{handler}", after, "calls", ratios={"x frozen clock": after / before} if before else {}, note=f"frozen clock: {before}")
    figures.add("escaped", len(report.escaped), "exceptions", note=f"frozen clock: {len(frozen.escaped)}")
    figures.add("internal_errors", report.internal_errors, "counted")
    lane = report.lane
    figures.add("lane.sealed", lane["sealed"], "inputs", note=f"{lane['sealed_authentic']} passed the tag (all should)")
    figures.add("lane.impostor", lane["impostor"], "inputs", note=", ".join(f"{k} {lane['impostor.' + k]}" for k in fuzzkit.IMPOSTOR_KINDS))
    figures.add("lane.impostor_heard", lane["impostor_heard"], "inputs", note="impostors not counted as exactly one drop (must be 0)")
    figures.add("sessions_reestablished", report.sessions, "sessions", note="after a hostile CLOSE ended one")
    for target in fuzzkit.TARGETS:
        figures.add(f"max_time.{target}", report.max_seconds.get(target, 0.0) * 1e3, "ms/input")
    for target in fuzzkit.TARGETS:
        figures.add(f"max_alloc.{target}", report.max_alloc.get(target, 0) / 1024, "KiB/input", note="tracemalloc peak while one input ran")
    for target in fuzzkit.TARGETS:
        figures.add(f"max_kept.{target}", report.max_kept.get(target, 0) / 1024, "KiB/input", note="still held after one input")
    figures.add("growth", report.growth / (1 << 20), "MiB", note="traced memory after the run minus before")
    figures.add(
        "rate",
        total / report.seconds if report.seconds else None,
        "inputs/s",
        ratios={"x frozen, untraced": (total / report.seconds) / (sum(frozen.inputs.values()) / frozen.seconds)} if frozen.seconds and report.seconds else {},
        note="with tracemalloc on",
    )
    figures.add("still_delivers", int(alive), "bool", note="road alpha->beta and lane manor->worker after the run")
    figures.emit(args.json)
    for line in (report.escaped + frozen.escaped)[:10]:
        print("  " + line, file=sys.stderr)
    ok = not report.escaped and not frozen.escaped and report.internal_errors == 0 and alive and lane["impostor_heard"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
