"""Join flood: an established session's echo and a new estate's join, with and without a flood.

Three processes on loopback: the *victim* estate ``main`` (a RoadStack on
its own scheduler, keep on disk with its KeepWriter, echoing every message
back), the *flooder* (``--keys`` fresh Ed25519 keys, pregenerated, whose
signed JOINs it sends at ``--rate`` a second from ``--ports`` source ports
for ``--seconds``), and this one (``alpha``, which holds an established
session and measures echo round trips of 100 bytes one at a time, and a
newcomer that joins during the flood).  Figures, per acceptance policy
(``always``, ``never``), each with its ratio to the same run's no-flood
baseline:

* ``echo_p50_*`` / ``echo_p99_*``  round trip, milliseconds (target: p99 < 5 ms under flood)
* ``join_*``  a new estate's join: seconds until the victim answers (accepted under
  ``always``, pending under ``never``; target < 2 s under flood)

The flooder does not answer the victim's join cookies (a spoofed source
cannot); ``--answering`` makes it answer them, the strongest flood a real
address can send.  Run: ``.venv/bin/python bench/flood.py [--json] [--quick]``.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import shutil
import socket
import sys
import tempfile
import time
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import Figures, parser  # noqa: E402

PAYLOAD = b"x" * 100
ECHO_TIMEOUT = 5.0


# -- the victim ---------------------------------------------------------------------


def _victim(conn: Any, policy: str, keepdir: str, cookies: str, alpha: tuple[bytes, bytes], background: bool) -> None:
    try:
        from flowcast.runtime import Scheduler
        from flowcast.transport.keep import Keep, RemoteRecord, Status
        from flowcast.transport.keepwriter import KeepWriter
        from flowcast.transport.ports import UdpPort
        from flowcast.transport.road import RoadStack

        scheduler = Scheduler()
        writer = KeepWriter()
        keep = Keep(keepdir, writer=writer if background else None)
        keep.ensure_local("main")
        # alpha is an established estate: an operator accepted it (under never too)
        keep.add(RemoteRecord("alpha", "alpha", 0, alpha[0], alpha[1], Status.ACCEPTED))
        road = RoadStack(UdpPort("127.0.0.1", 0, scheduler=scheduler), keep, policy=policy, scheduler=scheduler, join_cookies=cookies)
        road.hooks.add("message", lambda message: road.send_bytes(message.data, message.remote, stream=message.stream))

        def command() -> None:
            if conn.recv() == "stop":
                counts = dict(road.counts)
                counts.update(keep_records=len(keep.remotes()), keep_batches=writer.batches, keep_written=writer.written)
                conn.send(("done", counts))
                scheduler.stop()

        scheduler.add_reader(conn, command)
        conn.send(("ready", road.address))
        scheduler.run()
        road.close()
        writer.close()
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(error).__name__}: {error}", traceback.format_exc(limit=6)))


# -- the flooder --------------------------------------------------------------------


def _flooder(conn: Any, target: Any, keys: int, ports: int, rate: float, seconds: float, answer: bool) -> None:
    try:
        from flowcast.transport import handshake as hs
        from flowcast.transport.crypto import LongTermKeys
        from flowcast.transport.joingate import parse_join_cookie, wrap_join
        from flowcast.transport.wire import PacketKind

        packets = [
            hs.build_join(LongTermKeys.generate(), f"flood{n}", "flood", 0, os.urandom(16), n + 1) for n in range(keys)
        ]
        socks = []
        for _ in range(ports):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            sock.setblocking(False)
            socks.append(sock)
        conn.send(("ready", None))
        conn.recv()
        sent = answered = dropped = 0
        start = time.monotonic()
        while True:
            elapsed = time.monotonic() - start
            if elapsed >= seconds:
                break
            due = int(elapsed * rate)
            while sent < due:
                try:
                    socks[sent % ports].sendto(packets[sent % keys], target)
                except OSError:
                    dropped += 1
                sent += 1
            readable, _, _ = select.select(socks, [], [], 0.001)
            for sock in readable:
                for _ in range(64):
                    try:
                        data = sock.recv(2048)
                    except OSError:
                        break
                    if answer and len(data) > 1 and data[1] == PacketKind.JOIN_COOKIE:
                        parsed = parse_join_cookie(data)
                        if parsed is not None and 0 < parsed[0] <= keys:
                            sock.sendto(wrap_join(packets[parsed[0] - 1], parsed[1]), target)
                            answered += 1
        conn.send(("done", {"sent": sent, "answered": answered, "send_errors": dropped, "seconds": time.monotonic() - start}))
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(error).__name__}: {error}", traceback.format_exc(limit=6)))


# -- this process: alpha and the newcomer -----------------------------------------------


def _expect(conn: Any, timeout: float) -> Any:
    if not conn.poll(timeout):
        raise RuntimeError("a bench process did not answer in time")
    reply = conn.recv()
    if reply[0] == "error":
        raise RuntimeError(f"bench process failed: {reply[1]}\n{reply[2]}")
    return reply[1]


def _estate(name: str) -> Any:
    from flowcast.transport.keep import Keep
    from flowcast.transport.ports import UdpPort
    from flowcast.transport.road import RoadStack

    keep = Keep(None)
    keep.ensure_local(name)
    return RoadStack(UdpPort("127.0.0.1", 0), keep, policy="once")


def _pump(stacks: list, timeout: float) -> None:
    """Wait for a datagram or a timer (at most ``timeout``), then service: what came is read."""
    wait = timeout
    for stack in stacks:
        deadline = stack.next_deadline()
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - stack.clock.now()))
    select.select([s.port.fileno() for s in stacks], [], [], wait)
    for stack in stacks:
        stack.service()


def _pause(stacks: list, seconds: float) -> None:
    """Wait between probes while still servicing (acks and timers keep flowing)."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        _pump(stacks, left)


class _Prober:
    """alpha's echo round trips, one at a time, and at most one joining newcomer."""

    def __init__(self, target: Any, alpha: Any) -> None:
        self.target = target
        self.alpha = alpha
        self.stacks = [self.alpha]
        attempt = self.alpha.join(target)
        end = time.monotonic() + 10.0
        while not self.alpha.is_allowed("main") and time.monotonic() < end:
            _pump(self.stacks, 0.01)
        if not self.alpha.is_allowed("main"):
            raise RuntimeError(f"alpha could not join the victim ({attempt.result} {attempt.reason})")
        self.joins = 0

    def run(self, seconds: float, join_after: float | None) -> tuple[list[float], float | None]:
        """Echo round trips for ``seconds`` (s each); with ``join_after``, a newcomer's join time."""
        samples: list[float] = []
        attempt = None
        newcomer = None
        join_started = join_time = None
        start = time.monotonic()
        end = start + seconds
        while time.monotonic() < end:
            if join_after is not None and attempt is None and time.monotonic() - start >= join_after:
                self.joins += 1
                newcomer = _estate(f"newcomer{self.joins}")
                self.stacks.append(newcomer)
                join_started = time.monotonic()
                attempt = newcomer.join(self.target, timeout=30.0)
            sent = time.perf_counter()
            self.alpha.send_bytes(PAYLOAD, "main")
            self.alpha.flush()
            got = False
            while not got and time.perf_counter() - sent < ECHO_TIMEOUT:
                _pump(self.stacks, 0.002)
                got = bool(self.alpha.receive_many())
                if attempt is not None and join_time is None and attempt.result is not None:
                    join_time = time.monotonic() - join_started
            samples.append(time.perf_counter() - sent)
            _pause(self.stacks, 0.002)  # ~200 round trips a second: a probe, not a load
        if attempt is not None and join_time is None:
            # The flood is over or nearly: give the join the rest of its chance.
            limit = time.monotonic() + 10.0
            while attempt.result is None and time.monotonic() < limit:
                _pump(self.stacks, 0.01)
            join_time = time.monotonic() - join_started if attempt.result is not None else None
        if newcomer is not None:
            self.stacks.remove(newcomer)
            newcomer.close()
        return samples, join_time

    def close(self) -> None:
        self.alpha.close()


def _percentile(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_policy(policy: str, args: Any) -> dict[str, Any]:
    """Baseline then flood for one acceptance policy; a fresh victim and keep each time."""
    ctx = multiprocessing.get_context("spawn")
    keepdir = tempfile.mkdtemp(prefix="flowcast-flood-")
    victim_conn, child_conn = ctx.Pipe()
    alpha = _estate("alpha")
    keys = (alpha.keys.verkey, alpha.keys.pubkey)
    victim = ctx.Process(target=_victim, args=(child_conn, policy, os.path.join(keepdir, "keep"), args.cookies, keys, not args.sync_keep), daemon=True)
    victim.start()
    flooder = None
    try:
        target = _expect(victim_conn, 30.0)
        flood_conn, flood_child = ctx.Pipe()
        flooder = ctx.Process(
            target=_flooder,
            args=(flood_child, target, args.keys, args.ports, args.rate, args.seconds, args.answering),
            daemon=True,
        )
        flooder.start()
        prober = _Prober(target, alpha)
        try:
            base, base_join = prober.run(args.baseline, join_after=args.baseline / 4)
            _expect(flood_conn, 120.0)  # keys made
            flood_conn.send("go")
            flood, flood_join = prober.run(args.seconds, join_after=min(1.0, args.seconds / 4))
        finally:
            prober.close()
        flood_stats = _expect(flood_conn, 30.0)
        victim_conn.send("stop")
        counts = _expect(victim_conn, 30.0)
    finally:
        for process in (victim, flooder):
            if process is not None:
                process.join(5.0)
                if process.is_alive():
                    process.kill()
        shutil.rmtree(keepdir, ignore_errors=True)
    return {"base": base, "base_join": base_join, "flood": flood, "flood_join": flood_join, "flooder": flood_stats, "victim": counts}


def _ratio(value: float | None, base: float | None) -> dict[str, float]:
    return {"x baseline": value / base} if value is not None and base else {}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--policies", default="always,never")
    p.add_argument("--seconds", type=float, default=8.0, help="flood duration")
    p.add_argument("--baseline", type=float, default=2.0, help="no-flood measurement")
    p.add_argument("--rate", type=float, default=2000.0, help="flood JOINs a second")
    p.add_argument("--keys", type=int, default=3000, help="fresh keys the flood signs with")
    p.add_argument("--ports", type=int, default=40, help="source ports the flood comes from")
    p.add_argument("--cookies", default="load", choices=["load", "always", "never"], help="the victim's join_cookies")
    p.add_argument("--sync-keep", action="store_true", help="the victim writes its keep on its own thread (as before the KeepWriter)")
    p.add_argument("--answering", action="store_true", help="the flooder answers join cookies")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds, args.baseline, args.keys, args.rate = min(args.seconds, 1.5), min(args.baseline, 0.5), min(args.keys, 300), min(args.rate, 1000.0)
    policies = [name for name in args.policies.split(",") if name]
    figures = Figures(
        "flood",
        quick=args.quick,
        seconds=args.seconds,
        rate=args.rate,
        keys=args.keys,
        ports=args.ports,
        cookies=args.cookies,
        sync_keep=args.sync_keep,
        answering=args.answering,
        policies=policies,
    )
    for policy in policies:
        result = run_policy(policy, args)
        base, flood = result["base"], result["flood"]
        victim, flooder = result["victim"], result["flooder"]
        note = (
            f"{len(flood)} round trips; flood {flooder['sent'] / max(flooder['seconds'], 1e-9):,.0f} JOINs/s, "
            f"{victim.get('join_cookies', 0):,} cookies sent, {victim.get('keep_records', 0):,} keep records"
        )
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            before = _percentile(base, q)
            after = _percentile(flood, q)
            figures.add(f"echo_{label}_baseline_{policy}", before * 1e3 if before is not None else None, "ms", note=f"{len(base)} round trips")
            figures.add(
                f"echo_{label}_flood_{policy}",
                after * 1e3 if after is not None else None,
                "ms",
                ratios=_ratio(after, before),
                note=note,
                extra={"victim_counts": victim, "flooder": flooder} if label == "p99" else {},
            )
        figures.add(f"join_baseline_{policy}", result["base_join"], "s")
        figures.add(
            f"join_flood_{policy}",
            result["flood_join"],
            "s",
            ratios=_ratio(result["flood_join"], result["base_join"]),
            note="answered (accepted or pending)" if result["flood_join"] is not None else "no answer",
        )
        figures.add(f"echo_max_flood_{policy}", max(flood) * 1e3 if flood else None, "ms", ratios=_ratio(max(flood) if flood else None, max(base) if base else None))
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
