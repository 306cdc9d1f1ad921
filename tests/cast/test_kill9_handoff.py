"""Kill -9 of the subscribing estate at 30 random instants of a live CAST stream: the application
applies every message exactly once.

abc's manor publishes a numbered stream (``cast publish`` fed by
``handoffplay.feed``); xyz's manor subscribes and applies each message
into the durable table ``applied`` (tests/cast/handoffplay.py).  The test
kills xyz -- supervisor and house, ``SIGKILL`` to the process group --
at a random instant once it is applying, starts it again, 30 times, then
lets it catch up.  Before the hand-off was durable, what the inbox had
committed and the flow had not taken yet was lost at each kill (the
cursor was past it), so ``applied`` never reached the count.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import time
from pathlib import Path

from tests.house.estates import free_udp_port, start_estate, stop_estate, wait_for

PLAY = Path(__file__).resolve().parent / "handoffplay.py"
N = 8000
KILLS = 30


def _layouts(tmp: Path) -> tuple[Path, Path]:
    a_port, x_port = free_udp_port(), free_udp_port()
    (tmp / "pub.flo").write_text(f"""house manor

load {PLAY}

framer pour be active first go
  frame go
    do queue to outbox at enter
    do queue to acks at enter
    do handoffplay feed to outbox with count {N} per_tick 20
    do cast publish from outbox to acks with name "abc/messages/n/{{id}}"
""")
    (tmp / "sub.flo").write_text(f"""house manor

load {PLAY}

framer take be active first go
  frame go
    do queue to inbox at enter
    do cast subscribe to inbox with pattern "abc/messages/**" estate "abc"
    do handoffplay apply from inbox
""")
    (tmp / "abc.yaml").write_text(f"""
estate: abc
roads:
  main: {{port: {a_port}, acceptance: always}}
policy:
  - {{allow: subscribe, estate: xyz, share: cast}}
cast:
  subscribers: [{{estate: xyz, patterns: ["abc/messages/**"]}}]
houses:
  - {{name: manor, flow: pub.flo, manor: true}}
""")
    (tmp / "xyz.yaml").write_text(f"""
estate: xyz
roads:
  main:
    port: {x_port}
    acceptance: always
    remotes: [{{estate: abc, host: 127.0.0.1, port: {a_port}}}]
policy:
  - {{allow: write, estate: abc, share: "cast.*"}}
cast: {{lease: 6}}
houses:
  - {{name: manor, flow: sub.flo, manor: true}}
""")
    return tmp / "abc.yaml", tmp / "xyz.yaml"


def _applied(inbox: Path) -> tuple[int, dict]:
    """Rows in ``applied`` and the ``totals`` table, read as another process would (read-only)."""
    if not inbox.exists():
        return 0, {}
    import msgpack

    db = sqlite3.connect(f"file:{inbox}?mode=ro", uri=True, timeout=5)
    try:
        count = db.execute("SELECT count(*) FROM tables WHERE name='applied'").fetchone()[0]
        totals = {msgpack.unpackb(k): msgpack.unpackb(v) for k, v in db.execute("SELECT key, value FROM tables WHERE name='totals'")}
        values = sorted(msgpack.unpackb(v) for (v,) in db.execute("SELECT value FROM tables WHERE name='applied'"))
    except sqlite3.OperationalError:  # the house has not made its schema yet
        return 0, {}
    finally:
        db.close()
    totals["values"] = values
    return count, totals


def _kill(process) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def test_kill_9_of_the_subscribing_house_at_30_instants_applies_every_message_exactly_once(tmp_path):
    abc_layout, xyz_layout = _layouts(tmp_path)
    inbox = tmp_path / "run" / "xyz" / "cast" / "inbox-manor.sqlite3"
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    abc = start_estate(abc_layout)
    xyz = start_estate(xyz_layout)
    try:
        for kill in range(KILLS):
            before = _applied(inbox)[0]
            if before >= N:
                break
            wait_for(lambda: _applied(inbox)[0] > before, 30, what=f"xyz applying again before kill {kill}")
            time.sleep(rng.uniform(0.0, 0.3))  # the random instant, not a synchronisation
            _kill(xyz)
            xyz = start_estate(xyz_layout)
        assert kill >= KILLS - 1, f"the stream ended after {kill} kills: make it longer"
        wait_for(lambda: _applied(inbox)[0] >= N, 90, what=f"all {N} applied")
        code, out = stop_estate(xyz)
        assert code == 0, out
    finally:
        for process in (xyz, abc):
            if process.poll() is None:
                _kill(process)
    count, totals = _applied(inbox)
    assert count == N and totals["values"] == list(range(N))
    assert totals.get("twice", 0) == 0 and totals["applied"] == N and totals.get("other", 0) == 0
