"""A demo export with known answers: a small flow plus scripted message traffic.

The flow (logged shares ``counter`` and ``light``) runs in a virtual-clock
House, so its share events are the same on every run.  Message events are
scripted through the recorder API the transport will call, with latencies
chosen so every Spark figure is known in advance (:data:`EXPECTED`): the
end-to-end tests compare against it, and a person can run
``python -m flowcast.export.demo DIR`` then the Spark jobs and check the
report by eye.

Two estates: ``alpha`` (house ``demo``) sends, ``beta`` (house ``main``)
receives.  Route ``fast`` carries 100 messages with latencies 1..100 ms,
route ``slow`` 20 messages of 10 ms (latency left for the job to derive
from sent/delivered times), with resends, missed segments, five held back
by the receiving link to restore order (transport ``buffered``, not
causal), one denial, and presence changes seen by alpha.

Their routers record share to share (flowcast.routing.events), on a third
stretch of time: route ``tally`` 21 messages routed, 20 landed with
latencies 3..60 ms (the last four of one stamp, numbered ``STAMP:N``), one
never landed; one write to beta's ``secret`` refused by beta's policy, and
the error report routed back to alpha.

On a fourth stretch, alpha's CAST cache publishes 12 messages and beta
subscribes to ``alpha/news/*`` (flowcast.export.castevents): the first 5
delivered 20 ms after they were stored, then beta is away (its lease
lapses), resyncs from its cursor and gets the next 5 in one batch (11..15 s
late, 4..0 seqs behind) with one sent twice and dropped; the last 2 expire
before it asks again and reach it as a gap.

On a fifth stretch, beta's causal mailboxes (flowcast.export.causalevents)
deliver topic ``chat`` (subscription ``log``) from alice and bob and topic
``news`` (``feed``) from alice: four of alice's chat messages wait 0.1..0.4 s
for their deps, two of bob's 1 s and 3 s (the second with no reported lag:
the job derives it), one of bob's is abandoned when its epoch closes and one
rejected by predicate 2; beta fetches two deps from alpha (0.5 s and 1.5 s
after they were missed), and alpha's relay catches bob equivocating.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flowcast.export.recorder import Recorder

__all__ = ["ALICE", "BOB", "DEMO_FLOW", "EPOCH", "EXPECTED", "FAST", "SLOW", "TALLY_ROUTE", "write_demo", "main"]

#: 2026-11-22T00:00:00Z: the virtual clock's zero in wall time.
EPOCH = 1_795_305_600.0

DEMO_FLOW = """\
house demo
init .counter with 0
init .light with "red"
log .counter .light
framer main be active first tick
  frame tick
    recur
    inc .counter with 1
    go done if .counter >= 5
  frame done
    put "green" into .light
    bid stop me
"""

FAST = (("counter", "demo", "alpha", ""), ("counter", "main", "beta", ""))
SLOW = (("light", "demo", "alpha", ""), ("light", "main", "beta", ""))
FAST_ROUTE = "counter/demo/alpha/ -> counter/main/beta/"
SLOW_ROUTE = "light/demo/alpha/ -> light/main/beta/"
# Routers' routes, share/yard/estate/channel (docs/export.md "Routed messages"); beta's house is its manor.
TALLY = ("counter/demo/alpha/main", "tally/main/beta/main")
SECRET = ("counter/demo/alpha/main", "secret//beta/main")
REPORT = ("secret/main/beta/main", "counter/demo/alpha/main")  # the error report for the refusal
TALLY_ROUTE, SECRET_ROUTE, REPORT_ROUTE = (" -> ".join(r) for r in (TALLY, SECRET, REPORT))
DENIAL = "denied: write of 'secret' by 'alpha' (peer) on 'main' denied by policy"
CAST_SUB = "00112233445566778899aabbccddeeff"  # beta's subscription id, hex
CAST_PATTERN = "alpha/news/*"
ALICE, BOB = "a1" * 32, "b0" * 32  # causal publishers' verify keys, hex

EXPECTED: dict[str, Any] = {
    "share_events": {"counter": 5, "light": 1},
    # (estate, house, share) -> (updates, seconds, per_second, last fields); counter is 1..5 at t = 0, 0.25, .. 1.0
    "shares": {
        ("alpha", "demo", "counter"): (5, 1.0, 4.0, {"value": 5}),
        ("alpha", "demo", "light"): (1, 0.0, None, {"value": "green"}),
    },
    # (estate, house, share, field) -> (samples, min, mean, max, last): numeric fields only
    "share_fields": {("alpha", "demo", "counter", "value"): (5, 1.0, 3.0, 5.0, 5.0)},
    # (estate, house, share, field) -> [(seconds from EPOCH, mean)], one point per update here
    "share_series": {("alpha", "demo", "counter", "value"): [(0.0, 1.0), (0.25, 2.0), (0.5, 3.0), (0.75, 4.0), (1.0, 5.0)]},
    "latency": {  # route -> (delivered, p50, p95, p99)
        FAST_ROUTE: (100, 0.050, 0.095, 0.099),
        SLOW_ROUTE: (19, 0.010, 0.51, 0.51),  # 14 of 10 ms, 5 buffered 0.11..0.51 s
    },
    "throughput": {  # route -> {minute offset from EPOCH: delivered}
        FAST_ROUTE: {0: 50, 1: 50},
        SLOW_ROUTE: {1: 5, 2: 14},
    },
    "loss": {  # route -> (sent, delivered, lost, resent, missed, denied)
        FAST_ROUTE: (100, 100, 0, 0, 0, 0),
        SLOW_ROUTE: (20, 19, 1, 2, 3, 1),
    },
    # (subscriber, sub, topic, publisher) -> (delivered, buffered, released, p50_lag, p95_lag, max_lag, rejected, abandoned)
    "causal": {
        ("beta/main", "log", "chat", ALICE): (10, 4, 4, 0.2, 0.4, 0.4, 0, 0),
        ("beta/main", "log", "chat", BOB): (5, 3, 2, 1.0, 3.0, 3.0, 1, 1),
        ("beta/main", "feed", "news", ALICE): (3, 0, 0, None, None, None, 0, 0),
    },
    # (observer, topic, publisher, kind, reason) -> (messages, events)
    "causal_evidence": {
        ("beta/main", "chat", BOB, "rejected", "not a reply"): (1, 1),
        ("beta/main", "chat", BOB, "abandoned", None): (1, 1),
        ("alpha/demo", "chat", BOB, "equivocation", None): (1, 1),
    },
    # (relay, topic, source) -> (fetched, p50_wait, p95_wait, max_wait)
    "causal_fetch": {("beta/main", "chat", "alpha"): (2, 0.5, 1.5, 1.5)},
    "presence": [  # (remote, status, since, until) seconds from EPOCH
        ("beta", "joined", 0.0, 60.0),
        ("beta", "lost", 60.0, 70.0),
        ("beta", "joined", 70.0, None),
    ],
    "routed": {  # route -> (routed, landed, refused, lost, timed, p50, p95, p99, max)
        TALLY_ROUTE: (21, 20, 0, 1, 20, 0.030, 0.057, 0.060, 0.060),  # 20 landed after 3, 6, .. 60 ms
        SECRET_ROUTE: (1, 0, 1, 0, 0, None, None, None, None),
        REPORT_ROUTE: (1, 1, 0, 0, 1, 0.008, 0.008, 0.008, 0.008),
    },
    "routed_refused": {(SECRET_ROUTE, "denied"): 1},  # (route, reason) -> count
    # (subscriber, sub, publisher) -> (delivered, last_seq, timed, p50, p99, max, p50_seq_lag, p99_seq_lag, max_seq_lag)
    "cast_lag": {("beta/main", CAST_SUB, "alpha"): (10, 10, 10, 0.020, 15.01, 15.01, 0, 4, 4)},
    # (publisher, subscriber, sub) -> (pattern, resyncs, resync_seqs, asked, forwarded, batches, duplicates, gaps,
    # gap_seqs, leases_expired)
    "cast_resync": {("alpha", "beta", CAST_SUB): (CAST_PATTERN, 1, 5, 1, 10, 6, 1, 1, 2, 1)},
    "events": 6 + 100 * 2 + 20 + 19 + 2 + 3 + 5 + 1 + 3 + (21 + 20) + (1 + 1) + (1 + 1) + (12 + 6 + 10 + 2 + 1 + 1 + 2)
    + (14 + 10 + 3 + 2 + 1),
}


def run_flow(recorder: Recorder, clock: list[Callable[[], float]] | None = None) -> None:
    """Run the demo flow in a virtual house, its logged shares watched by ``recorder``.

    A recorder reads its clock when a share changes, so ``clock[0]``, the
    one the recorder reads through, is the house's virtual clock while the
    house runs (the share events then fall on its ticks, 0, 0.25, ...).
    """
    from flowcast.flow.floscript import parse_flo
    from flowcast.house.house import House

    house = House(parse_flo(DEMO_FLOW, "demo.flo").house("demo"), virtual=True, period=0.25, out=lambda line: None)
    before = clock[0] if clock else None
    if clock:
        clock[0] = house.clock.now
    try:
        recorder.watch_house(house)
        house.run(until=10.0)
    finally:
        if clock:
            clock[0] = before


def write_demo(root: Path | str, **writer: Any) -> dict[str, Any]:
    """Write the demo's events under ``root``; returns :data:`EXPECTED`."""
    now = [0.0]
    source = [lambda: now[0]]  # scripted time for the message events; the house's while it runs
    clock = lambda: source[0]()  # noqa: E731
    alpha = Recorder(root, estate="alpha", house="demo", clock=clock, epoch=EPOCH, **writer)
    beta = Recorder(root, estate="beta", house="main", clock=clock, epoch=EPOCH, **writer)
    run_flow(alpha, source)

    def at(t: float) -> None:
        now[0] = t

    for i in range(100):  # fast: sent every 1.2 s from t=0, latency (i+1) ms
        latency = (i + 1) / 1000
        at(i * 1.2)
        alpha.message("sent", f"fast-{i}", FAST[0], FAST[1], 100 + i)
        at(i * 1.2 + latency)
        beta.message("delivered", f"fast-{i}", FAST[0], FAST[1], 100 + i, latency)
    for i in range(20):  # slow: sent every 4 s from t=100, 10 ms on the wire
        t = 100.0 + 4.0 * i
        at(t)
        alpha.message("sent", f"slow-{i}", SLOW[0], SLOW[1], 2048)
        if i in (3, 7):
            alpha.message("resent", f"slow-{i}", SLOW[0], SLOW[1], 2048, segment=2)
        if i == 5:
            for seg in (1, 2, 3):
                beta.message("segment-missed", f"slow-{i}", SLOW[0], SLOW[1], 2048, segment=seg)
        at(t + 0.010)
        if i == 19:
            beta.message("denied", f"slow-{i}", SLOW[0], SLOW[1], 2048, detail="not authorized")
            continue
        if i < 5:  # held by the link for (i + 1) / 10 s until the message before it came
            beta.message("buffered", f"slow-{i}", SLOW[0], SLOW[1], 2048)
            at(t + 0.010 + (i + 1) / 10)
            beta.message("delivered", f"slow-{i}", SLOW[0], SLOW[1], 2048)
        else:
            beta.message("delivered", f"slow-{i}", SLOW[0], SLOW[1], 2048)
    _routes(at, alpha, beta)
    _cast(at, alpha, beta)
    _causal(at, alpha, beta)
    for t, status in ((0.0, "joined"), (60.0, "lost"), (70.0, "joined")):
        at(t)
        alpha.presence("beta", status)
    alpha.close()
    beta.close()
    return EXPECTED


def _routes(at: Callable[[float], None], alpha: Recorder, beta: Recorder) -> None:
    """The routers' events, as alpha's and beta's routers record them (ids ``STAMP:N``, stamps = send times)."""
    for i in range(21):  # tally: 16 a second apart from t=180, then 5 in one tick at t=200
        t = 180.0 + i if i < 16 else 200.0
        msg_id = f"{t!r}:{max(i - 16, 0)}"
        at(t)
        alpha.message("routed", msg_id, *TALLY, 12, detail="tally", share="counter")
        if i == 20:
            continue  # never lands: the house stopped with it on the way
        at(t + 0.003 * (i + 1))
        beta.message("landed", msg_id, *TALLY, 12, detail="tally", share="tally")
    at(210.0)
    alpha.message("routed", "210.0:0", *SECRET, 12, detail="tally", share="counter")
    at(210.004)  # beta's manor refuses it as it arrives (no id there) and reports back
    beta.message("refused", None, *SECRET, None, detail=DENIAL, share="secret")
    beta.message("routed", "210.004:0", *REPORT, 140, detail="error", share="secret")
    at(210.012)
    alpha.message("landed", "210.004:0", *REPORT, 140, detail="error", share="counter")


def _cast(at: Callable[[float], None], alpha: Recorder, beta: Recorder) -> None:
    """CAST's events as alpha's cache and beta's subscription record them (docs/export.md "CAST events")."""
    ids = [f"{i:032x}" for i in range(1, 13)]
    names = [f"alpha/news/{i}" for i in range(1, 13)]
    for i in range(5):  # live: stored, forwarded at once, delivered 20 ms after the store
        at(300.0 + i)
        alpha.cast("cast-stored", ids[i], None, seq=i + 1, name=names[i])
        at(300.01 + i)
        alpha.cast("cast-forwarded", None, "beta", size=7, seq=i + 1, upto=i + 1, count=1, sub=CAST_SUB, name=CAST_PATTERN)
        at(300.02 + i)
        beta.cast("cast-delivered", ids[i], "alpha", size=7, latency=0.02, seq=i + 1, sub=CAST_SUB, name=names[i])
    for i in range(5, 10):  # beta away
        at(300.0 + i)
        alpha.cast("cast-stored", ids[i], None, seq=i + 1, name=names[i])
    at(315.0)
    alpha.cast("cast-lease-expired", None, "beta", seq=5, upto=5, sub=CAST_SUB, name=CAST_PATTERN)
    at(319.99)
    beta.cast("cast-resync", None, "alpha", seq=6, sub=CAST_SUB, name=CAST_PATTERN, detail="asked")
    at(320.0)
    alpha.cast("cast-resync", None, "beta", seq=6, upto=10, count=5, sub=CAST_SUB, name=CAST_PATTERN, detail="served")
    alpha.cast("cast-forwarded", None, "beta", size=35, seq=6, upto=10, count=5, sub=CAST_SUB, name=CAST_PATTERN)
    at(320.01)
    for i in range(5, 10):
        beta.cast("cast-delivered", ids[i], "alpha", size=7, seq=i + 1, sub=CAST_SUB, name=names[i])
    at(320.02)
    beta.cast("cast-duplicate", ids[9], "alpha", seq=10, sub=CAST_SUB, name=names[9])
    for i in (10, 11):  # stored, then expired before beta came back for them
        at(320.0 + i)
        alpha.cast("cast-stored", ids[i], None, seq=i + 1, name=names[i])
    at(400.0)
    alpha.cast("cast-gap", None, "beta", seq=11, upto=12, count=2, sub=CAST_SUB, name=CAST_PATTERN, detail="sent")
    at(400.01)
    beta.cast("cast-gap", None, "alpha", seq=11, upto=12, count=2, sub=CAST_SUB, name=CAST_PATTERN, detail="delivered")


def _causal(at: Callable[[float], None], alpha: Recorder, beta: Recorder) -> None:
    """Causal events as beta's mailboxes and both relays record them (docs/export.md "Causal events")."""
    def ids(prefix: int, n: int) -> list[str]:
        return [f"{prefix:02x}{i:062x}" for i in range(n)]

    log = {"sub": "log", "share": "chat.log"}
    for i, h in enumerate(ids(0xA1, 10)):  # alice on chat: the even ones from 2 on wait i/20 s
        at(500.0 + i)
        lag = i / 20 if i in (2, 4, 6, 8) else 0.0
        if lag:
            beta.causal("causal-buffered", h, "chat", ALICE, epoch=0, seq=i + 1, count=1, **log)
            at(500.0 + i + lag)
        beta.causal("causal-delivered", h, "chat", ALICE, epoch=0, seq=i + 1, lag=lag, **log)
    at(510.0)
    beta.causal("causal-fetched", "0f" * 32, "chat", None, latency=0.5, remote="alpha")
    bob = ids(0xB0, 7)
    for j, h in enumerate(bob[:5]):  # bob on chat, every 5 s: the second and fourth wait 1 s and 3 s
        at(520.0 + 5 * j)
        if j in (1, 3):
            beta.causal("causal-buffered", h, "chat", BOB, epoch=0, seq=20 + j, count=1, **log)
            at(520.0 + 5 * j + j)
        lag = {1: 1.0, 3: None}.get(j, 0.0)  # the fourth's lag left for the job to derive from the times
        beta.causal("causal-delivered", h, "chat", BOB, epoch=0, seq=20 + j, lag=lag, **log)
    at(545.0)  # one waits for a dep that never comes
    beta.causal("causal-buffered", bob[5], "chat", BOB, epoch=0, seq=25, count=1, **log)
    at(550.0)
    beta.causal("causal-rejected", bob[6], "chat", BOB, detail="not a reply: names nothing it answers", **log)
    at(552.0)
    beta.causal("causal-fetched", "1f" * 32, "chat", None, latency=1.5, remote="alpha")
    at(555.0)
    alpha.causal("causal-equivocation", "ed" * 32, "chat", BOB, detail="de" * 32)
    at(560.0)  # its epoch closes
    beta.causal("causal-abandoned", bob[5], "chat", BOB, epoch=0, seq=25, count=1, detail="ee" * 32, **log)
    for k, h in enumerate(ids(0xA2, 3)):  # alice on news: nothing waits
        at(570.0 + k)
        beta.causal("causal-delivered", h, "news", ALICE, epoch=0, seq=40 + k, lag=0.0, sub="feed", share="news.feed")

def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flowcast.export.demo", description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="export directory to write the demo's segments into")
    args = p.parse_args(argv)
    write_demo(args.dir)
    print(f"demo: wrote {EXPECTED['events']} events under {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
