"""kill -9 at random instants, real estates on loopback (``flowcast run``): nothing lost where a message
leaves one durable store for the next.

(a) The subscriber: estate beta's one house holds its relay, its ledger and a
flow that takes each causal delivery off its queue and writes it down in
the turn that took it.  beta is SIGKILLed ten times at random instants of a
live stream from alpha and started again each time.  Every message alpha
saw acknowledged must be written down at beta; a message written twice
must be flagged ``redelivered`` every time but the first, and nothing
arrives before its deps.

(b) The relay hop: estate r relays the topic and is fed only by CAST from
u (u's policy grants r no ``causal`` fetch, and announces no heads), so
whatever r's CAST inbox counts done and r's own store never kept is lost
for good.  r is SIGKILLed at random instants of u's stream, each while its
cache's disk stalls (r's writes there wait, its turns go on); afterwards
r's cache must hold every message u acknowledged.

Each kill ends the whole estate (its process group): a house that dies is
started by hand, at once, instead of after the supervisor's back-off.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from flowcast.cast import Cache
from flowcast.causal.keys import create_signer
from flowcast.causal.message import decode
from tests.house.estates import kill_estate, free_udp_port, lines, start_estate, wait_for

FLOW = Path(__file__).with_name("kill9_flow.py")


def _publisher(tmp: Path, name: str, port: int, peer: str, *, fetch: bool, per_tick: int = 4, size: int = 16) -> Path:
    """The layout of ``name``, the topic's owner, publishing from its flow until ``stop`` exists."""
    (tmp / f"{name}.flo").write_text(f"""house manor

load {FLOW}

framer feed be active first go
  frame go
    do queue to outbox at enter
    do queue to acks at enter
    do kill9 feed with stop "{tmp / 'stop'}" acks "{tmp / 'acks.jsonl'}" per_tick {per_tick} size {size} from acks to outbox
    do causal publish from outbox to acks with topic "log"
""")
    causal = f"{{allow: causal, estate: {peer}, share: causal}}" if fetch else ""
    path = tmp / f"{name}.yaml"
    path.write_text(f"""estate: {name}
period: 0.02
roads:
  main: {{port: {port}, acceptance: always}}
policy:
  - {{allow: write, estate: {peer}, share: "cast.*"}}
  - {{allow: subscribe, estate: {peer}, share: cast}}
  {('- ' + causal) if causal else ''}
cast:
  subscribers:
    - {{estate: {peer}, patterns: ["{name}/causal/**"]}}
causal:
  keys: keys
  topics:
    log: {{owner: {name}.pub, sign_as: {name}}}
  peers: []
  heads_every: null
houses:
  - {{name: manor, flow: {name}.flo, manor: true}}
""")
    return path


def _follower(tmp: Path, name: str, port: int, upstream: str, up_port: int, flow: str, period: float) -> Path:
    """The layout of ``name``, relaying the topic of ``upstream`` (its only peer) and running ``flow``."""
    (tmp / f"{name}.flo").write_text(f"house manor\n\nload {FLOW}\n\n{flow}\n")
    path = tmp / f"{name}.yaml"
    path.write_text(f"""estate: {name}
period: {period}
roads:
  main:
    port: {port}
    acceptance: always
    remotes: [{{estate: {upstream}, host: 127.0.0.1, port: {up_port}}}]
policy:
  - {{allow: write, estate: {upstream}, share: "cast.*"}}
  - {{allow: causal, estate: {upstream}, share: causal}}
cast:
  lease: 5
causal:
  keys: keys
  topics:
    log: {{owner: {upstream}.pub}}
  peers: [{upstream}]
  heads_every: null
houses:
  - {{name: manor, flow: {name}.flo, manor: true}}
""")
    return path


def _acked(tmp: Path) -> list[dict]:
    return [r for r in lines(tmp / "acks.jsonl") if "hash" in r]


def _done(tmp: Path) -> bool:
    return any("done" in r for r in lines(tmp / "acks.jsonl"))


def _kill(process: subprocess.Popen, layout: Path | None = None) -> str:
    """SIGKILL the estate's houses and then its supervisor (tests.house.estates.kill_estate); its output."""
    run = layout.parent / "run" / layout.stem if layout is not None else Path("/nonexistent")
    return kill_estate(process, run)


def _end(process: subprocess.Popen) -> str:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        out, _ = process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        return _kill(process)
    return out.decode(errors="replace")


def _kills(rng: random.Random, count: int, layout: Path, process: subprocess.Popen, progress, deadline: float,
           stall: Path | None = None) -> tuple[subprocess.Popen, int]:
    """Kill the estate of ``layout`` ``count`` times at random instants, each time once it made ``progress``
    again after its restart; the live process and how many kills there were (fewer if ``deadline`` came).

    ``stall``: an SQLite file of the estate whose disk stalls before each kill -- this process holds its
    write lock, as a disk that stops answering for a moment would -- so what the estate writes there
    waits, while everything else in it goes on, until the kill.
    """
    kills = 0
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        mark = progress()
        wait_for(lambda: progress() > mark, timeout=20, what=f"{layout.stem} to make progress")
        locked = None
        if stall is not None:
            locked = sqlite3.connect(stall, timeout=5, isolation_level=None)
            locked.execute("BEGIN IMMEDIATE")
        try:
            time.sleep(rng.uniform(0.05, 0.6))  # the random instant itself, not a wait for anything
            _kill(process, layout)
        finally:
            if locked is not None:
                locked.execute("ROLLBACK")
                locked.close()
        kills += 1
        process = start_estate(layout)
    return process, kills


def test_kill_9_of_a_causal_subscriber_at_random_instants_loses_nothing_and_flags_every_duplicate(tmp_path):
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    create_signer(tmp_path / "keys", "alpha")
    a_port, b_port = free_udp_port(), free_udp_port()
    record = tmp_path / "beta.jsonl"
    alpha_yaml = _publisher(tmp_path, "alpha", a_port, "beta", fetch=True)
    beta_yaml = _follower(tmp_path, "beta", b_port, "alpha", a_port, f"""framer take be active first go
  frame go
    do queue to got at enter
    do causal subscribe to got with topic "log"
    do kill9 record with out "{record}" from got""", 0.05)
    alpha = start_estate(alpha_yaml)
    beta = start_estate(beta_yaml)
    kills = 0
    try:
        beta, kills = _kills(rng, 10, beta_yaml, beta, lambda: len(lines(record)), time.monotonic() + 35)
        (tmp_path / "stop").touch()
        wait_for(lambda: _done(tmp_path), timeout=15, what="alpha's last publish to be acknowledged")
        wanted = {r["hash"] for r in _acked(tmp_path)}
        wait_for(lambda: wanted <= {r["hash"] for r in lines(record)}, timeout=20,
                 what=f"beta to write down all {len(wanted)} acknowledged messages (seed {seed})")
    finally:
        b_out = _end(beta)
        a_out = _end(alpha)
    assert kills == 10, (kills, seed)
    got = lines(record)
    first: dict[str, int] = {}
    for n, r in enumerate(got):
        if r["hash"] in first:
            assert r["redelivered"], f"{r['hash']} delivered twice, unflagged (seed {seed})"
        else:
            first[r["hash"]] = n
            assert all(first.get(dep, n) < n for dep in r["deps"] if dep in wanted), f"delivered before its deps (seed {seed})"
    assert set(first) == wanted, (len(set(first) - wanted), seed)
    assert len(wanted) > 1000
    assert "Traceback" not in a_out + b_out, (a_out + b_out)[-3000:]


def test_kill_9_of_a_relay_fed_only_by_cast_loses_nothing_at_that_hop(tmp_path):
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    create_signer(tmp_path / "keys", "u")
    u_port, r_port = free_udp_port(), free_udp_port()
    u_yaml = _publisher(tmp_path, "u", u_port, "r", fetch=False)
    r_yaml = _follower(tmp_path, "r", r_port, "u", u_port, "framer idle be active first rest\n  frame rest\n    print resting", 0.02)
    cache = tmp_path / "run" / "r" / "cast" / "cache.sqlite3"

    def held() -> set[str]:
        try:
            opened = Cache.open(cache, estate="r", readonly=True)
        except Exception:  # noqa: BLE001 - not made yet
            return set()
        try:
            rows = opened._reader.execute("SELECT data FROM messages WHERE name='r/causal/log' AND data IS NOT NULL").fetchall()
        finally:
            opened.close()
        return {decode(bytes(row[0])).hash.hex() for row in rows}

    u = start_estate(u_yaml)
    r = start_estate(r_yaml)
    kills = 0
    try:
        r, kills = _kills(rng, 8, r_yaml, r, lambda: len(held()), time.monotonic() + 30, stall=cache)
        (tmp_path / "stop").touch()
        wait_for(lambda: _done(tmp_path), timeout=15, what="u's last publish to be acknowledged")
        wanted = {r["hash"] for r in _acked(tmp_path)}
        missing = wanted
        end = time.monotonic() + 15
        while missing and time.monotonic() < end:  # r catches up from its cursor: bounded
            missing = wanted - held()
            time.sleep(0.1)
    finally:
        r_out = _end(r)
        u_out = _end(u)
    assert not missing, f"{len(missing)} of u's {len(wanted)} messages lost at r (seed {seed})"
    assert kills == 8, (kills, seed)
    assert len(wanted) > 1000
    assert "Traceback" not in u_out + r_out, (u_out + r_out)[-3000:]
