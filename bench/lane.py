"""Lane benchmark: flowcast LaneStack (Unix datagrams between yards) vs the limit and peers.

Two processes on one host.  Figures, with ratios (``value / peer``) to the
peers measured in the same run (bench/peers.py):

* ``lane_100B``    100-byte messages one way, msgs/s (target >= 300,000)
* ``lane_64KiB``   64 KiB messages, MB/s
* ``lane_rtt_100B`` 100-byte echo round trip, median microseconds
* the same three ``..._auth``: with lane keys (every datagram sealed and
  checked, lanekeys.py), ratio ``x plain`` to the unkeyed figure of this run
* ``lane_100B_acked`` / ``lane_100B_acked_auth``: acknowledged lane
  (``acks=True``), unkeyed and keyed -- the keyed one is what an estate's
  houses run

Run: ``.venv/bin/python bench/lane.py [--json] [--quick] [--repeats N] [--no-peers]``.
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

        peers = peer_bench.all_peers(quick=quick, only=["uxd", "zmq", "zmq_curve", "raet_lane"])
    figures = Figures("lane", quick=quick, repeats=args.repeats)
    small = best(args.repeats, lambda: measure("lane", "stream", 100, 20_000 if quick else 3_000_000, budget), "msgs")
    figures.add(
        "lane_100B",
        small.get("msgs"),
        "msgs/s",
        ratios=ratios(small.get("msgs"), peers, {"uxd raw": "uxd_100B", "zmq": "zmq_tcp_100B", "zmq+curve": "zmq_tcp_curve_100B", "raet": "raet_lane_100B"}),
        note=small.get("note", ""),
    )
    large = best(args.repeats, lambda: measure("lane", "stream", 65536, 500 if quick else 50_000, budget), "mbps")
    figures.add(
        "lane_64KiB",
        large.get("mbps"),
        "MB/s",
        ratios=ratios(large.get("mbps"), peers, {"zmq": "zmq_tcp_64KiB", "zmq+curve": "zmq_tcp_curve_64KiB"}),
        note=large.get("note", ""),
    )
    rtt = best(args.repeats, lambda: measure("lane", "echo", 100, 300 if quick else 5000, budget), "value", lower=True)
    figures.add("lane_rtt_100B", rtt.get("value"), "us", note=rtt.get("note", ""))
    # With and without authentication, same run, same sizes.
    from flowcast.transport.lanekeys import new_secret

    keyed = {"_lane_secret": new_secret()}
    small_auth = best(args.repeats, lambda: measure("lane", "stream", 100, 20_000 if quick else 3_000_000, budget, keyed), "msgs")
    figures.add("lane_100B_auth", small_auth.get("msgs"), "msgs/s", ratios=_plain(small_auth.get("msgs"), small.get("msgs")), note=small_auth.get("note", ""))
    large_auth = best(args.repeats, lambda: measure("lane", "stream", 65536, 500 if quick else 50_000, budget, keyed), "mbps")
    figures.add("lane_64KiB_auth", large_auth.get("mbps"), "MB/s", ratios=_plain(large_auth.get("mbps"), large.get("mbps")), note=large_auth.get("note", ""))
    rtt_auth = best(args.repeats, lambda: measure("lane", "echo", 100, 300 if quick else 5000, budget, keyed), "value", lower=True)
    figures.add("lane_rtt_100B_auth", rtt_auth.get("value"), "us", ratios=_plain(rtt_auth.get("value"), rtt.get("value")), note=rtt_auth.get("note", ""))
    acked = best(args.repeats, lambda: measure("lane", "stream", 100, 20_000 if quick else 3_000_000, budget, {"acks": True}), "msgs")
    figures.add("lane_100B_acked", acked.get("msgs"), "msgs/s", ratios=_plain(acked.get("msgs"), small.get("msgs"), "x raw"), note=acked.get("note", ""))
    acked_auth = best(
        args.repeats, lambda: measure("lane", "stream", 100, 20_000 if quick else 3_000_000, budget, {"acks": True, **keyed}), "msgs"
    )
    figures.add(
        "lane_100B_acked_auth", acked_auth.get("msgs"), "msgs/s", ratios=_plain(acked_auth.get("msgs"), acked.get("msgs")), note=acked_auth.get("note", "")
    )
    for name, fig in peers.items():
        figures.add(f"peer.{name}", fig["value"], fig["unit"], note=fig["note"])
    figures.emit(args.json)
    return 0


def _plain(value: float | None, plain: float | None, label: str = "x plain") -> dict[str, float]:
    """``{label: value / plain}``: a figure against its reference in this run (keyed against unkeyed)."""
    return {label: value / plain} if value and plain else {}


if __name__ == "__main__":
    sys.exit(main())
