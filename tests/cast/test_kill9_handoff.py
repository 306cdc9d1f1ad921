"""Kill -9 of the subscribing estate at random instants of a live CAST stream: the application
applies every message exactly once, and what it publishes in the same turn is published once.

abc's manor publishes a numbered stream (``cast publish`` fed by
``handoffplay.feed``); xyz's manor subscribes and applies each message
into the durable table ``applied`` (tests/cast/handoffplay.py).  The test
kills xyz -- ``SIGKILL`` to its house, then to its supervisor --
at a random instant once it is applying, starts it again, 30 times, then
lets it catch up.  Before the hand-off was durable, what the inbox had
committed and the flow had not taken yet was lost at each kill (the
cursor was past it), so ``applied`` never reached the count.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from pathlib import Path

from tests.house.estates import free_udp_port, house_pids, kill_estate, start_estate, stop_estate, wait_for

PLAY = Path(__file__).resolve().parent / "handoffplay.py"
KILLS = 30


def _layouts(tmp: Path, apply: str) -> tuple[Path, Path]:
    a_port, x_port = free_udp_port(), free_udp_port()
    (tmp / "pub.flo").write_text(f"""house manor

load {PLAY}

framer pour be active first go
  frame go
    do queue to outbox at enter
    do queue to acks at enter
    do handoffplay feed to outbox with stop "{tmp / 'stop'}" fed "{tmp / 'fed'}" per_tick 20
    do cast publish from outbox to acks with name "abc/messages/n/{{id}}"
""")
    (tmp / "sub.flo").write_text(f"""house manor

load {PLAY}

framer take be active first go
  frame go
    do queue to inbox at enter
    do cast subscribe to inbox with pattern "abc/messages/**" estate "abc"
    do {apply}
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


def _applied(inbox: Path, table: str = "applied", totals_table: str = "totals") -> tuple[int, dict]:
    """Rows in ``table`` and the ``totals_table`` table, read as another process would (read-only)."""
    if not inbox.exists():
        return 0, {}
    import msgpack

    db = sqlite3.connect(f"file:{inbox}?mode=ro", uri=True, timeout=5)
    try:
        count = db.execute("SELECT count(*) FROM tables WHERE name=?", (table,)).fetchone()[0]
        totals = {msgpack.unpackb(k): msgpack.unpackb(v) for k, v in db.execute("SELECT key, value FROM tables WHERE name=?", (totals_table,))}
        values = sorted(msgpack.unpackb(v) for (v,) in db.execute("SELECT value FROM tables WHERE name=?", (table,)))
    except sqlite3.OperationalError:  # the house has not made its schema yet
        return 0, {}
    finally:
        db.close()
    totals["values"] = values
    return count, totals


def _running(tmp_path: Path) -> bool:
    return bool(house_pids(tmp_path / "run" / "xyz"))


def _kill_at_random(tmp_path: Path, kills: int, apply: str, table: str, totals_table: str):
    """Kill xyz ``kills`` times, each at a random instant once it is applying again; then stop the
    stream and let xyz apply the rest.  How many were published (abc's ``fed``), and what xyz did."""
    abc_layout, xyz_layout = _layouts(tmp_path, apply)
    inbox = tmp_path / "run" / "xyz" / "cast" / "inbox-manor.sqlite3"
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    progress = lambda: _applied(inbox, table, totals_table)[0]  # noqa: E731
    abc = start_estate(abc_layout)
    xyz = start_estate(xyz_layout)
    try:
        for kill in range(kills):
            before = progress()
            wait_for(lambda: progress() > before, 30, what=f"xyz applying again before kill {kill}")
            time.sleep(rng.uniform(0.0, 0.3))  # the random instant, not a synchronisation
            wait_for(lambda: _running(tmp_path), 30, what="xyz's house pid")
            kill_estate(xyz, tmp_path / "run" / "xyz")  # the house by SIGKILL, not by its supervisor's death
            (tmp_path / "run" / "xyz" / "supervisor.json").unlink(missing_ok=True)  # the dead one's
            xyz = start_estate(xyz_layout)
        (tmp_path / "stop").touch()
        count = int(wait_for(lambda: (tmp_path / "fed").exists() and (tmp_path / "fed").read_text(), 30, what="the stream's end"))
        wait_for(lambda: progress() >= count, 90, what=f"all {count} applied")
        wait_for(lambda: _running(tmp_path), 30, what="the last xyz's house running")  # a stop, not one mid-start
        code, out = stop_estate(xyz)
        assert code == 0, out
    finally:
        for process, name in ((xyz, "xyz"), (abc, "abc")):
            if process.poll() is None:
                kill_estate(process, tmp_path / "run" / name)
    return count, _applied(inbox, table, totals_table)


def test_kill_9_of_the_subscribing_house_at_30_instants_applies_every_message_exactly_once(tmp_path):
    n, (count, totals) = _kill_at_random(tmp_path, KILLS, "handoffplay apply from inbox", "applied", "totals")
    assert count == n and totals["values"] == list(range(n))
    assert totals.get("twice", 0) == 0 and totals["applied"] == n and totals.get("other", 0) == 0


def test_consume_and_publish_killed_at_50_instants_has_each_effect_once_in_the_table_and_the_stream(tmp_path):
    from flowcast.cast import Cache

    n, (count, stock) = _kill_at_random(tmp_path, 50, "handoffplay confirm from inbox with work 0.03", "confirmed", "stock")
    assert count == n and stock["values"] == list(range(n))
    assert stock.get("twice", 0) == 0 and stock["reserved"] == n
    cache = Cache.open(tmp_path / "run" / "xyz" / "cast" / "cache.sqlite3", estate="xyz", readonly=True)
    try:
        confirms = [m.name for m in _read_all(cache, "xyz/confirms/*")]
    finally:
        cache.close()
    assert sorted(int(name.rsplit("/", 1)[1]) for name in confirms) == list(range(n))  # each once, none lost


def _read_all(cache, pattern: str) -> list:
    out, after = [], 0
    for _ in range(10_000):
        read = cache.read(after, pattern=pattern, limit=1000)
        out.extend(read)
        if read.upto <= after:
            return out
        after = read.upto
    raise AssertionError("the cache read did not end")
