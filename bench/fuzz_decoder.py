"""Fuzz every decoder a datagram meets: at least 100,000 generated inputs, no exception escapes.

Targets, fed each input:

* ``wire.unpack_header`` and ``wire.decode_frames`` (may raise only WireError);
* ``reliable.Channel.handle`` on a live channel, as if the input were an
  authenticated body (may raise only WireError);
* ``handshake`` parsers: join, join reply, hello, cookie, initiate (return None);
* ``RoadStack._receive`` and ``LaneStack._receive`` of live stacks that hold
  an established session (must never raise; every drop is counted).

Inputs come from hypothesis: raw binary, and mutations (bit flips,
truncation, splices, header rewrites keeping valid session ids) of real
datagrams captured from a run.  Run:
``.venv/bin/python bench/fuzz_decoder.py [--examples N] [--seed S] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flowcast.runtime import Scheduler, VirtualClock  # noqa: E402
from flowcast.transport import handshake as hs  # noqa: E402
from flowcast.transport.keep import Keep  # noqa: E402
from flowcast.transport.lane import LaneStack  # noqa: E402
from flowcast.transport.ports.sim import SimNetwork  # noqa: E402
from flowcast.transport.reliable import Channel  # noqa: E402
from flowcast.transport.road import RoadStack  # noqa: E402
from flowcast.transport.wire import HEADER_SIZE, WireError, decode_frames, unpack_header  # noqa: E402


def _world():
    scheduler = Scheduler(VirtualClock())
    net = SimNetwork(scheduler, seed=1, delay=0.001, record=True)
    stacks = []
    for name in ("alpha", "beta"):
        keep = Keep(None)
        keep.ensure_local(name)
        stacks.append(RoadStack(net.port(name), keep, policy="always", scheduler=scheduler))
    alpha, beta = stacks
    alpha.join("beta")
    scheduler.run(until=1.0)
    assert alpha.is_allowed("beta")
    for i in range(50):
        alpha.send({"n": i, "pad": "x" * (i * 37)}, "beta")
    alpha.send_bytes(os.urandom(200_000), "beta")
    beta.send({"back": 1}, "alpha", reliable=False)
    scheduler.run(until=3.0)
    samples = [data for _, _, _, data in net.trace]
    lane = LaneStack(net.port("lane"), "lane", {"alpha": "fuzzer"})
    return scheduler, alpha, beta, lane, samples


def _mutations(samples):
    sample = st.sampled_from(samples)

    def flip(args):
        data, index, bit = args
        if not data:
            return data
        b = bytearray(data)
        b[index % len(b)] ^= 1 << bit
        return bytes(b)

    def splice(args):
        a, b, cut = args
        return a[: cut % (len(a) + 1)] + b[cut % (len(b) + 1) :]

    def rehead(args):
        data, kind, flags = args
        return data[:1] + bytes([kind, flags]) + data[3:]

    return st.one_of(
        st.binary(max_size=2048),
        st.tuples(sample, st.integers(0, 1 << 20), st.integers(0, 7)).map(flip),
        st.tuples(sample, st.integers(0, 1 << 20)).map(lambda t: t[0][: t[1] % (len(t[0]) + 1)]),
        st.tuples(sample, sample, st.integers(0, 1 << 20)).map(splice),
        st.tuples(sample, st.integers(0, 255), st.integers(0, 255)).map(rehead),
        st.tuples(sample, st.binary(min_size=1, max_size=64)).map(lambda t: t[0][:HEADER_SIZE] + t[1]),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    scheduler, alpha, beta, lane, samples = _world()
    channel = Channel(65000, lambda flow, flags, payload: None, None)
    escaped: list[str] = []
    counts = {"inputs": 0}
    now = scheduler.clock.now()

    def feed(data: bytes) -> None:
        counts["inputs"] += 1
        try:
            for call in (lambda: unpack_header(data), lambda: decode_frames(data), lambda: channel.handle(data, now)):
                try:
                    call()
                except WireError:
                    pass
            hs.parse_join(data)
            hs.parse_join_reply(data)
            hs.open_hello(data, beta.keys)
            hs.open_initiate(data, now, beta._jar)
            alpha._receive(data, "fuzzer", now)
            beta._receive(data, "fuzzer", now)
            lane._receive(data, "fuzzer", now)
        except Exception as error:  # noqa: BLE001 - the point: record what escaped
            escaped.append(f"{type(error).__name__}: {error} on {data[:40].hex()}")

    test = settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )(given(_mutations(samples))(feed))
    start = time.perf_counter()
    test()
    elapsed = time.perf_counter() - start
    internal = alpha.counts["internal_errors"] + beta.counts["internal_errors"] + lane.counts["internal_errors"]
    result = {
        "inputs": counts["inputs"],
        "seconds": round(elapsed, 1),
        "escaped": len(escaped),
        "internal_errors": internal,
        "alpha_counts": dict(alpha.counts),
        "beta_counts": dict(beta.counts),
        "lane_counts": dict(lane.counts),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"fuzz_inputs: {counts['inputs']} inputs in {elapsed:.1f} s")
        print(f"escaped_exceptions: {len(escaped)}")
        print(f"internal_errors: {internal}")
        print(f"beta drops: {dict(beta.counts)}")
        for line in escaped[:10]:
            print("  " + line)
    ok = not escaped and internal == 0 and counts["inputs"] >= min(args.examples, 100_000)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
