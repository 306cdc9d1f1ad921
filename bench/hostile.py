"""An accepted estate turned hostile (issue 25): each attack class against a real estate, an honest peer beside it.

For every class (``--classes`` picks some; bench/_hostile_classes.py lists
them) a fresh victim is started with ``flowcast run`` on a generated
layout whose budgets are stated in it (bench/_hostile_victim.py); beside
it an honest estate reads a small share of the victim's one round trip at
a time (``--rate`` a second at most); and one attacker estate (three for
``incomplete``), accepted by the victim, misbehaves for ``--seconds``
(bench/_hostile_attacks.py).  Each peer is a child process with its own
router and road on a real clock.  Figures, one line each (``--json``: one
object), per class C:

* ``hostile_C_p99_ms``  the honest round trip's p99 during the attack; goal: at most
  2x the same class's baseline (``hostile_C_baseline_p99_ms``, ``--baseline`` seconds
  just before) plus 10 ms.  A read not answered within 5 s counts as 5 s (``lost``).
* ``hostile_C_rss_growth_mb``  the victim's peak RSS during the attack (VmRSS sampled
  every 50 ms from /proc) less its RSS just before; goal: within the configured budgets
  that govern the class (named in the line) plus a fixed allowance.
* ``hostile_joins_amplification``  bytes the victim sent the flood's unproven addresses
  per byte they sent it, counted at the flood's sockets; goal: at most 3.

* ``hostile_causal_forged_stored``  of the messages naming a real dep with a forged
  signature (sent in one answer with that dep), how many the victim's relay stored:
  counted in its CAST cache file after it stopped; goal: 0.

The budgets, as the victim's layout states them (bench/_hostile_victim.py
``Settings``; ``--set PATH=VALUE`` changes one or adds a setting a fix
introduces, e.g. ``--set roads.main.hold_budget=8388608``): road
``hold_budget`` 16 MiB, ``max_message`` 16 MiB, ``backlog_bytes`` 4 MiB;
cast ``window_bytes`` 1 MiB, ``max_subs`` 64, ``max_bytes`` 256 MiB; causal
``max_buffered`` 10,000, ``max_per_publisher`` 1,000; and what the router
keeps per ``SHARE.error`` (1,000 reports of at most 16 KiB).  Each class is
judged against the ones that govern what it attacks (its line names them:
bench/_hostile_classes.py), plus a 16 MiB allowance for the interpreter's
own churn.  A goal not reached prints ``NOT met`` / ``NOT within`` and, in
the JSON, ``goal_met: false``; the run goes on and exits 0 (a bench reports,
it does not judge); a victim that died says ``victim_alive: false``.

Run: ``.venv/bin/python bench/hostile.py [--json] [--quick] [--classes big,joins]``.
A class whose run fails (the victim died, a peer could not join) prints its
figures as n/a with the reason; the others still run.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ChildHouse, Figures, parser  # noqa: E402
from _hostile_classes import BY_NAME, CLASSES, Class  # noqa: E402
from _hostile_peer import peer_main  # noqa: E402
from _hostile_victim import Settings, Victim  # noqa: E402

MB = 1e6
#: The goals of issue 25's "Done when".
P99_FACTOR, P99_SLACK_MS, AMPLIFICATION_GOAL = 2.0, 10.0, 3.0


def percentile(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _keys() -> dict[str, str]:
    """The causal topic's owner (the victim's, never used to sign here) and the attacker's publisher key."""
    from nacl.signing import SigningKey

    owner = SigningKey.generate()
    publisher = SigningKey.generate()
    return {"owner": bytes(owner.verify_key).hex(), "publisher": bytes(publisher.verify_key).hex(), "seed": bytes(publisher).hex()}


def _peer(ctx: Any, top: Path, name: str, road: dict[str, Any]) -> ChildHouse:
    spec = {"estate": name, "keep": str(top / f"{name}-keep"), "road": road}
    return ChildHouse(ctx, peer_main, spec, name, timeout=30.0)


def _wait_probe(honest: ChildHouse, victim: Victim, limit: float) -> tuple[dict[str, Any], int]:
    """The honest peer's samples, and the victim's peak RSS while they were taken (sampled every 50 ms)."""
    peak = 0
    end = time.monotonic() + limit
    while not honest.conn.poll(0.05):
        peak = max(peak, victim.memory().get("VmRSS", 0))
        if time.monotonic() > end:
            raise RuntimeError(f"the honest peer gave no samples within {limit:.0f} s")
    return honest.expect("probed", 1.0), max(peak, victim.memory().get("VmRSS", 0))


def run_class(case: Class, args: Any, keys: dict[str, str], settings: Settings) -> dict[str, Any]:
    """One class: a fresh victim, the honest peer's baseline, then the attack beside it."""
    ctx = multiprocessing.get_context("spawn")
    top = Path(tempfile.mkdtemp(prefix=f"fchostile-{case.name}-"))
    shape = case.shape(args.quick, keys)
    params = case.params(args.quick, keys)
    pad = case.pad(args.quick)
    out: dict[str, Any] = {"budget": case.budget(settings, shape, params), "params": {k: v for k, v in params.items() if k != "seed"}}
    victim = None
    peers: list[ChildHouse] = []
    try:
        victim = Victim(top, shape, settings)
        honest = _peer(ctx, top, "honest", {})
        attackers = [_peer(ctx, top, name, case.road) for name in shape.attackers[: case.attackers]]
        peers = [honest, *attackers]
        for peer in peers:
            peer.expect("ready", 30.0)
        for peer in [honest, *(attackers if case.join else [])]:
            if not peer.ask("allowed", "join", *victim.address, 15.0, timeout=30.0):
                raise RuntimeError(f"{peer.name} could not join the victim")
        honest.ask("probed", "probe", min(0.5, args.baseline), args.rate, pad, timeout=30.0)  # warm: connections, caches
        honest.send("probe", args.baseline, args.rate, pad)
        base, _ = _wait_probe(honest, victim, args.baseline + 30)
        before = victim.memory().get("VmRSS", 0)
        if case.name == "joins":
            params["target"] = list(victim.address)
        armed = [attacker.ask("armed", "attack", case.name, args.seconds, params, timeout=120.0) for attacker in attackers]
        honest.send("probe", args.seconds, args.rate, pad)
        during, peak = _wait_probe(honest, victim, args.seconds + 60)
        stats = [attacker.expect("attacked", 60.0) for attacker in attackers]
        out.update(base=base, during=during, rss_before=before, rss_peak=peak, attack=stats, armed=armed,
                   alive=victim.alive(), counts=victim.status().get("counts", {}))
    except Exception as error:  # noqa: BLE001 - a class that fails is a figure of n/a with its reason
        out["note"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]
    finally:
        for peer in peers:
            peer.close()
        if victim is not None:
            out["exit"] = victim.stop()
            forged = [bytes.fromhex(h) for info in out.get("armed", ()) for h in info.get("forged", ())]
            if forged:
                out["forged"] = (victim.stored(forged), len(forged))
            if "note" in out:
                out["note"] += " | victim: " + victim.output()[-300:].replace("\n", " / ")
        shutil.rmtree(top, ignore_errors=True)
    return out


def add_figures(figures: Figures, case: Class, run: dict[str, Any]) -> None:
    name = f"hostile_{case.name}"
    note = run.get("note", "")
    budget, budget_is = run["budget"]
    base = run.get("base", {}).get("samples", [])
    during = run.get("during", {}).get("samples", [])
    b99, d99 = percentile(base, 0.99), percentile(during, 0.99)
    figures.add(f"{name}_baseline_p99_ms", None if b99 is None else b99 * 1e3, "ms",
                note=note or f"{len(base)} honest reads before the attack", extra={"title": case.title})
    if b99 is not None and d99 is not None:
        goal = b99 * 1e3 * P99_FACTOR + P99_SLACK_MS
        met = d99 * 1e3 <= goal
        p99_note = f"baseline {b99 * 1e3:.3g} ms, x2+10ms goal: {'met' if met else 'NOT met'}; {len(during)} reads, {run['during']['lost']} lost"
    else:
        met, p99_note = None, note or "no samples"
    figures.add(f"{name}_p99_ms", None if d99 is None else d99 * 1e3, "ms",
                ratios={"x baseline": d99 / b99} if b99 and d99 else {}, note=p99_note,
                extra={"goal_met": met, "title": case.title, "attack": run.get("attack"), "victim_alive": run.get("alive"),
                       "victim_counts": run.get("counts"), "params": run.get("params")})
    if "rss_peak" in run:
        growth = max(0, run["rss_peak"] - run["rss_before"])
        met = growth <= budget
        figures.add(f"{name}_rss_growth_mb", growth / MB, "MB",
                    note=f"budget {budget / MB:.4g} MB ({budget_is}): {'within' if met else 'NOT within'}; before {run['rss_before'] / MB:.4g} MB",
                    extra={"goal_met": met, "budget_mb": budget / MB})
    else:
        figures.add(f"{name}_rss_growth_mb", None, "MB", note=note, extra={"goal_met": None, "budget_mb": budget / MB})
    if "forged" in run:
        stored, sent = run["forged"]
        figures.add(f"{name}_forged_stored", stored, "messages",
                    note=f"of {sent} naming a real dep with a forged signature, in one answer with that dep; goal 0: "
                         + ("met" if stored == 0 else "NOT met" if stored else "n/a"),
                    extra={"goal_met": None if stored is None else stored == 0})
    if case.amplification:
        stats = (run.get("attack") or [{}])[0]
        sent, got = stats.get("sent_bytes", 0), stats.get("received", 0)
        value = got / sent if sent else None
        figures.add(f"{name}_amplification", value, "x",
                    note=(f"{got:,} B sent to unproven addresses for {sent:,} B from them ({stats.get('replies', 0):,} replies"
                          f" to {stats.get('sent', 0):,} JOINs); 3x goal: {'met' if value is not None and value <= AMPLIFICATION_GOAL else 'NOT met'}")
                    if sent else note or "nothing sent",
                    extra={"goal_met": None if value is None else value <= AMPLIFICATION_GOAL})


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--classes", default=",".join(c.name for c in CLASSES), help="comma-separated, of: " + ", ".join(c.name for c in CLASSES))
    p.add_argument("--seconds", type=float, default=8.0, help="each attack's duration")
    p.add_argument("--baseline", type=float, default=3.0, help="each class's honest baseline before its attack")
    p.add_argument("--rate", type=float, default=50.0, help="honest reads a second at most (one at a time)")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="a setting of the victim's layout, e.g. roads.main.hold_budget=8388608 (repeatable)")
    args = p.parse_args(argv)
    names = [n for n in args.classes.split(",") if n]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown class {unknown[0]!r}; the classes are {', '.join(BY_NAME)}")
    if args.quick:
        args.seconds, args.baseline = min(args.seconds, 1.0), min(args.baseline, 0.5)
    settings = Settings()
    for assignment in args.set:
        try:
            settings.set(assignment)
        except ValueError as error:
            p.error(str(error))
    figures = Figures("hostile", quick=args.quick, seconds=args.seconds, baseline=args.baseline, rate=args.rate,
                      classes=names, budgets={k: v for k, v in vars(settings).items() if k != "extra"},
                      set=args.set)
    keys = _keys()
    for name in names:
        case = BY_NAME[name]
        printed = len(figures.items)
        add_figures(figures, case, run_class(case, args, keys, settings))
        if not args.json:
            for figure in figures.items[printed:]:
                print(figure.line(), flush=True)
    if args.json:
        figures.emit(True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
