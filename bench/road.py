"""Road benchmark: flowcast RoadStack (encrypted, acknowledged UDP) vs the limit and peers.

Two processes on loopback.  Figures, each with ratios to the peers measured
in the same run (bench/peers.py):

* ``road_100B``        100-byte messages one way, msgs/s (target >= 100,000)
* ``road_64KiB``       64 KiB messages, MB/s, loopback-sized datagrams (target >= 200)
* ``road_64KiB_1232``  the same in 1,232-byte datagrams, as between hosts (target >= 0.8x raw UDP at 1,200 B)
* ``road_64KiB_malloc_tuned`` 64 KiB again with glibc's heap trimming relaxed
  (see ``_stackbench.tune_malloc``): what allocator tuning buys
* ``road_rtt_100B``    100-byte echo round trip, median microseconds (target <= 200)

Ratios read ``value / peer``: for rates above 1 is faster, for times below 1.
Run: ``.venv/bin/python bench/road.py [--json] [--quick] [--repeats N] [--no-peers]``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Figures, parser  # noqa: E402
from _stackbench import best, measure, ratios  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--no-peers", action="store_true", help="measure only flowcast")
    p.set_defaults(repeats=1)
    args = p.parse_args(argv)
    quick = args.quick
    budget = 0.3 if quick else 2.0
    peers: dict = {}
    if not args.no_peers:
        import peers as peer_bench

        # Best of --repeats on both sides: the same treatment for flowcast and its peers.
        peers = peer_bench.all_peers(quick=quick, only=["udp", "zmq", "zmq_curve", "zmq_reqrep", "raet_road"], repeats=args.repeats)
    figures = Figures("road", quick=quick, repeats=args.repeats)

    small = best(args.repeats, lambda: measure("road", "stream", 100, 20_000 if quick else 2_000_000, budget), "msgs")
    figures.add(
        "road_100B",
        small.get("msgs"),
        "msgs/s",
        ratios=ratios(small.get("msgs"), peers, {"udp raw": "udp_100B", "zmq": "zmq_tcp_100B", "zmq+curve": "zmq_tcp_curve_100B", "raet": "raet_road_100B"}),
        note=small.get("note", ""),
    )
    rtt = best(args.repeats, lambda: measure("road", "echo", 100, 300 if quick else 5000, budget), "value", lower=True)
    figures.add(
        "road_rtt_100B",
        rtt.get("value"),
        "us",
        ratios=ratios(rtt.get("value"), peers, {"udp raw": "udp_rtt_100B", "zmq req/rep": "zmq_reqrep_rtt_100B", "raet": "raet_road_rtt_100B"}),
        note=rtt.get("note", ""),
    )
    for name, options in (
        ("road_64KiB", {}),
        # Between hosts: 1,232-byte datagrams (roadmtu.PATH_SAFE) and GRO, as a road bound to a
        # non-loopback address opens its port (routing.wiring); GSO is used whenever the kernel has it.
        ("road_64KiB_1232", {"datagram_size": 1232, "_gro": True}),
        ("road_64KiB_malloc_tuned", {"_tune_malloc": True}),  # last: the tuning is process-wide
    ):
        large = best(args.repeats, lambda o=options: measure("road", "stream", 65536, 500 if quick else 50_000, budget, o), "mbps")
        figures.add(
            name,
            large.get("mbps"),
            "MB/s",
            ratios=ratios(
                large.get("mbps"),
                peers,
                {"udp raw": "udp_1200B" if "datagram_size" in options else "udp_64KiB", "zmq": "zmq_tcp_64KiB", "zmq+curve": "zmq_tcp_curve_64KiB", "raet": "raet_road_64KiB"},
            ),
            note=large.get("note", ""),
        )
    for name, fig in peers.items():
        figures.add(f"peer.{name}", fig["value"], fig["unit"], note=fig["note"])
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
