"""Memory connected peers can pin on a road, on real loopback (issue 10, part 3).

A victim estate runs in a spawned child (its RSS is its own); three joined
attackers and one honest estate run here.  Each attacker plays one attack
that pinned hundreds of MB before the hold budget: pieces of messages
declaring 2^32-1 segments (refused outright now, so also the smallest
pieces a message may have and one-byte last pieces), messages that never
complete, and pieces just over half a datagram.  The victim reports its RSS
(after ``gc.collect`` and ``malloc_trim``, so freed memory counts as freed)
and what its hold budget accounts, before the attack, after it, and after
the attackers went silent for ``incomplete_after`` + ``idle_after``.

The same run measures the victim twice: **bounded** (a 64 MiB budget, short
expiry and reaping) and **reference** (a budget of 2^40 and nothing expiring
within the run: only the per-session limits bound it, as before the
budget).  Ratios: RSS growth against accounted bytes (what is accounted is
what is held), bounded against reference, and the honest peer's echo round
trip during the attack against before it.

Run: ``PYTHONPATH=. .venv/bin/python bench/memory.py [--json] [--quick]``.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import select
import statistics
import sys
import time
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import Figures, parser  # noqa: E402

MiB = 1 << 20
BOUNDED = {"hold_budget": 64 * MiB, "incomplete_after": 2, "idle_after": 6}
REFERENCE = {"hold_budget": 1 << 40, "incomplete_after": 86_400, "idle_after": 86_400}
DEADLINE = 120.0  # no phase of a run takes longer


def _rss() -> int:
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    """The process's peak RSS so far (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _victim(conn: Any, options: dict[str, Any]) -> None:
    """The attacked estate: serve, echo the honest peer, answer ``stats``, until ``stop``."""
    try:
        from flowcast.transport.keep import Keep
        from flowcast.transport.ports import UdpPort
        from flowcast.transport.road import RoadStack

        keep = Keep(None)
        keep.ensure_local("victim")
        stack = RoadStack(UdpPort("127.0.0.1", 0), keep, policy="always", **options)
        conn.send(("ready", stack.address))
        end = time.monotonic() + 10 * DEADLINE
        budget = stack.hold_budget
        peak = 0
        while time.monotonic() < end:
            stack.service()
            if budget.used > peak:
                peak = budget.used
            for message in stack.receive_many():
                if message.remote == "honest":
                    stack.send_bytes(message.data, "honest")
            stack.flush()
            if conn.poll():
                command = conn.recv()
                if command == "stop":
                    break
                conn.send(("stats", {
                    "rss": _rss(),
                    "hwm": _hwm(),
                    "used": budget.used,
                    "peak": peak,
                    "budget": dict(budget.counts),
                    "counts": {k: v for k, v in stack.counts.items() if k in ("bad_chunks", "reaped", "backlog_full")},
                    "sessions": sum(1 for r in stack.remotes.values() if r.session is not None),
                }))
            deadline = stack.next_deadline()
            wait = 0.005 if deadline is None else min(0.005, max(0.0, deadline - stack.clock.now()))
            select.select([stack.port.fileno()], [], [], wait)
        stack.close()
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(error).__name__}: {error}", traceback.format_exc(limit=6)))


def _ask(conn: Any, stacks: list, question: str = "stats") -> dict[str, Any]:
    from flowcast.transport.stack import serve

    conn.send(question)
    end = time.monotonic() + DEADLINE
    while not conn.poll() and time.monotonic() < end:
        serve(stacks, timeout=0.01)
    if not conn.poll():
        raise RuntimeError("the victim did not answer")
    reply = conn.recv()
    if reply[0] == "error":
        raise RuntimeError(f"victim failed: {reply[1]}\n{reply[2]}")
    return reply[1]


def _echo(honest: Any, others: list, count: int) -> float:
    """Median round trip (µs) of ``count`` 100-byte echoes from the honest estate."""
    from flowcast.transport.stack import serve

    samples = []
    for _ in range(count):
        start = time.perf_counter()
        honest.send_bytes(b"e" * 100, "victim")
        got: list = []
        if not serve([honest, *others], until=lambda: bool(got.extend(honest.receive_many()) or got), timeout=10.0):
            raise RuntimeError("an honest echo did not come back within 10 s")
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def run(options: dict[str, Any], rounds: int, echoes: int) -> dict[str, Any]:
    from flowcast.transport.keep import Keep
    from flowcast.transport.ports import UdpPort
    from flowcast.transport.road import RoadStack
    from flowcast.transport.stack import serve
    from tests.transport.attacks import Attacks, inject_sealed

    ctx = multiprocessing.get_context("spawn")
    conn, child = ctx.Pipe()
    proc = ctx.Process(target=_victim, args=(child, dict(options)), daemon=True)
    proc.start()
    stacks: list = []
    try:
        if not conn.poll(DEADLINE):
            raise RuntimeError("the victim did not start")
        reply = conn.recv()
        if reply[0] == "error":
            raise RuntimeError(f"victim failed: {reply[1]}\n{reply[2]}")
        address = reply[1]
        for name in ("honest", "mallory0", "mallory1", "mallory2"):
            keep = Keep(None)
            keep.ensure_local(name)
            stacks.append(RoadStack(UdpPort("127.0.0.1", 0), keep, policy="always"))
        for stack in stacks:
            stack.join(address)
        if not serve(stacks, until=lambda: all(s.is_allowed("victim") for s in stacks), timeout=DEADLINE):
            raise RuntimeError("the estates did not join the victim")
        honest, attackers = stacks[0], stacks[1:]
        serve(stacks, timeout=0.5)
        before = _ask(conn, stacks)
        echo_before = _echo(honest, attackers, echoes)
        attacks = Attacks(attackers[0].datagram_size - 64, attackers[0].max_message)
        start = time.monotonic()
        for _ in range(rounds):
            for stack, kind in zip(attackers, (attacks.tiny, attacks.never, attacks.half)):
                for body in kind():
                    inject_sealed(stack, "victim", body)
                    serve(stacks, timeout=0.002)  # paced: a full socket buffer would drop, not store
            if time.monotonic() - start > DEADLINE:
                break
        serve(stacks, timeout=0.5)
        attacked = _ask(conn, stacks)
        echo_during = _echo(honest, attackers, echoes)
        for stack in attackers:
            stack.close()  # silent from now on
        stacks = [honest]
        quiet = float(BOUNDED["incomplete_after"] + BOUNDED["idle_after"]) + 2.0  # the same wait for both runs
        serve(stacks, timeout=quiet)
        after = _ask(conn, stacks)
        conn.send("stop")
        return {"before": before, "attacked": attacked, "after": after, "quiet": quiet,
                "echo_before": echo_before, "echo_during": echo_during}
    finally:
        for stack in stacks:
            stack.close()
        proc.join(5)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=200, help="attack rounds (each ~1 MB from the three attackers)")
    args = p.parse_args(argv)
    rounds = 8 if args.quick else args.rounds
    echoes = 10 if args.quick else 50
    figures = Figures("memory", rounds=rounds, bounded=BOUNDED, reference=REFERENCE)
    options_of = {"bounded": BOUNDED, "reference": REFERENCE}
    results = {label: run(options, rounds, echoes) for label, options in options_of.items()}
    for label, r in results.items():
        base = r["before"]["rss"]
        grown = r["attacked"]["rss"] - base
        used = r["attacked"]["used"]
        peak = r["attacked"]["peak"]
        hwm = r["attacked"]["hwm"] - base
        left = r["after"]["rss"] - base
        figures.add(f"{label}_rss_before", base / MiB, "MiB")
        figures.add(f"{label}_accounted_peak", peak / MiB, "MiB",
                    ratios={"of_budget": peak / options_of[label]["hold_budget"]},
                    note=f"budget {r['attacked']['budget']}, {r['attacked']['counts']}")
        figures.add(f"{label}_rss_peak_growth", hwm / MiB, "MiB",
                    ratios={"rss_peak_growth/accounted_peak": hwm / peak if peak else float("nan")},
                    note="VmHWM over the RSS before the attack")
        figures.add(f"{label}_accounted_attacked", used / MiB, "MiB", note="0.5 s after the attack")
        figures.add(f"{label}_rss_growth_attacked", grown / MiB, "MiB",
                    ratios={"rss_growth/accounted": grown / used if used else float("nan")})
        figures.add(f"{label}_accounted_after_silence", r["after"]["used"] / MiB, "MiB",
                    note=f"{r['quiet']:.0f} s after the attackers went silent; sessions left {r['after']['sessions']}, {r['after']['counts']}")
        figures.add(f"{label}_rss_growth_after_silence", left / MiB, "MiB",
                    ratios={"of_attacked": left / grown if grown else float("nan")})
        figures.add(f"{label}_echo_while_held", r["echo_during"], "us",
                    ratios={"vs_before": r["echo_during"] / r["echo_before"]}, note=f"before {r['echo_before']:.0f} us")
    bounded, reference = results["bounded"], results["reference"]
    b_grown = bounded["attacked"]["hwm"] - bounded["before"]["rss"]
    r_grown = reference["attacked"]["hwm"] - reference["before"]["rss"]
    figures.add("bounded_vs_reference_rss_peak_growth", b_grown / MiB, "MiB",
                ratios={"bounded/reference": b_grown / r_grown if r_grown else float("nan")},
                note=f"reference {r_grown / MiB:.1f} MiB")
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
