"""``flowcast cast ls | stats | tail`` read an estate's CAST files, read-only, while its cache is open for writing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from flowcast.cast import Cache
from flowcast.cast.inbox import Inbox
from flowcast.cli.main import main
from flowcast.house.layout import load_layout


@pytest.fixture
def estate(tmp_path):
    (tmp_path / "idle.flo").write_text("house idle\nframer idle be active first rest\n  frame rest\n    print resting\n")
    path = tmp_path / "abc.yaml"
    path.write_text("estate: abc\nhouses:\n  - {name: manor, flow: idle.flo, manor: true}\ncast:\n  max_bytes: 1048576\n")
    layout = load_layout(path)
    layout.cast.dir.mkdir(parents=True)
    cache = Cache.open(layout.cast.cache_path, estate="abc", max_bytes=1 << 20)  # the running house's writer, in this test
    tickets = [cache.publish(f"abc/messages/{who}/{i}", f"{who} {i}".encode(), publisher=who) for i in range(5) for who in ("alice", "carol")]
    cache.flush()
    assert all(t.ok for t in tickets)
    yield path, layout, cache
    cache.close()


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["cast", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_stats_counts_what_the_cache_holds_while_it_is_open_for_writing(estate, capsys):
    path, layout, cache = estate
    before = os.stat(layout.cast.cache_path).st_mtime_ns
    code, out, _ = run(capsys, "stats", path, "--json")
    assert code == 0
    stats = json.loads(out)
    assert stats["messages"] == 10 and stats["high_seq"] == 10 and stats["max_bytes"] == 1 << 20
    assert stats["bytes"] > 10 * len("alice 0")
    assert os.stat(layout.cast.cache_path).st_mtime_ns == before  # read-only: nothing written
    code, out, _ = run(capsys, "stats", path)
    assert code == 0 and out.startswith("messages 10  bytes")


def test_tail_from_start_prints_matches_in_seq_order_then_follows_new_ones(estate, capsys):
    path, layout, cache = estate
    code, out, _ = run(capsys, "tail", path, "abc/messages/alice/*", "--from-start", "--json", "--count", "5")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [m["data"] for m in lines] == [f"alice {i}" for i in range(5)]
    assert [m["seq"] for m in lines] == sorted(m["seq"] for m in lines)
    # following: only what is published after it starts (published here before the bounded poll looks)
    cache.publish("abc/messages/alice/new", b"fresh", publisher="alice")
    cache.flush()
    code, out, _ = run(capsys, "tail", path, "abc/messages/alice/*", "--json", "--timeout", "0.5", "--every", "0.05")
    assert code == 0 and out == ""  # 'fresh' was there before this tail started
    code, out, _ = run(capsys, "tail", path, "abc/messages/**", "--from-start", "--timeout", "0.5", "--every", "0.05")
    assert code == 0 and len(out.splitlines()) == 11 and "fresh" in out.splitlines()[-1]


def test_tail_refuses_a_bad_pattern_and_stats_says_when_there_is_no_cache(tmp_path, estate, capsys):
    path, _layout, _cache = estate
    code, _, err = run(capsys, "tail", path, "abc/**/x", "--timeout", "0.1")
    assert code == 2 and "'**'" in err
    (tmp_path / "xyz.yaml").write_text("estate: xyz\nhouses:\n  - {name: manor, flow: idle.flo, manor: true}\n")
    code, _, err = run(capsys, "stats", tmp_path / "xyz.yaml")
    assert code == 1 and "no cast: section" in err


def test_ls_shows_leases_from_the_status_files_and_cursors_from_the_inboxes(estate, capsys):
    path, layout, _cache = estate
    status = layout.run / "status"
    status.mkdir(parents=True)
    held = {"estate": "xyz", "sid": "00" * 16, "pattern": "abc/messages/**", "split": ["id", 2, 0], "lease_left": 41.5,
            "cursor": 7, "sent": 9, "lag": 3}
    (status / "manor.json").write_text(json.dumps({"yard": "manor", "updated": time.time() - 60, "cast": {"held": [held], "publisher": {}}}))
    inbox = Inbox(layout.cast.inbox_path("manor"))
    inbox.add(b"\x01" * 16, repr(("xyz", "xyz/news/**", None, "inbox")), 12)
    inbox.close()
    code, out, _ = run(capsys, "ls", path, "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["held"] == [{"yard": "manor", "as_of": pytest.approx(60, abs=5), **held}]
    assert shown["inboxes"]["manor"][0]["cursor"] == 12 and "xyz/news/**" in shown["inboxes"]["manor"][0]["key"]
    code, out, _ = run(capsys, "ls", path)
    assert code == 0 and "xyz" in out and "lag 3" in out and "cursor 12" in out
    assert "(as of 60 s ago)" in out or "(as of 61 s ago)" in out  # a stale status file says so


def test_the_status_file_carries_the_house_cast_status(tmp_path):
    """What 'ls' reads: the status writer puts house.cast.status() in the file each period."""
    from types import SimpleNamespace

    from flowcast.house.estate import _status_writer
    from tests.routing.kit import World

    world = World(seed=3)
    router = world.routed_estate("abc", ["manor"])["manor"]
    held = [{"estate": "xyz", "pattern": "abc/**", "lease_left": 10.0, "cursor": 1, "sent": 2, "lag": 0}]
    cast = SimpleNamespace(status=lambda: {"held": held, "publisher": {"forwarded": 2}})
    house = SimpleNamespace(scheduler=world.scheduler, router=router, name="abc-manor", cast=cast)
    path = tmp_path / "manor.json"
    world.scheduler.spawn(_status_writer(house, path, "manor", True), name="status")
    world.run_for(0.5)
    assert json.loads(path.read_text())["cast"] == {"held": held, "publisher": {"forwarded": 2}}


@pytest.mark.parametrize("damaged", ["inbox", "cache"])
@pytest.mark.parametrize("command", ["ls", "stats"])
def test_a_damaged_inbox_or_cache_is_one_line_and_exit_3(tmp_path, capsys, damaged, command):
    (tmp_path / "idle.flo").write_text("house idle\nframer idle be active first rest\n  frame rest\n    print resting\n")
    path = tmp_path / "abc.yaml"
    path.write_text("estate: abc\nhouses:\n  - {name: manor, flow: idle.flo, manor: true}\ncast:\n")
    layout = load_layout(path)
    layout.cast.dir.mkdir(parents=True)
    Cache.open(layout.cast.cache_path, estate="abc").close()
    Inbox(layout.cast.inbox_path("manor")).close()
    bad = layout.cast.inbox_path("manor") if damaged == "inbox" else layout.cast.cache_path
    bad.write_bytes(b"")
    code, out, err = run(capsys, command, path)
    if damaged == "inbox" and command == "stats":  # stats reads the cache only
        assert code == 0, err
        return
    assert code == 3 and out == "" and err.count("\n") == 1, err
    assert str(bad) in err and "empty (0 bytes)" in err
    assert bad.read_bytes() == b""


def test_accept_loss_serves_a_cache_that_lost_messages_once_the_operator_says_so(tmp_path, capsys):
    from flowcast.cast.cachemark import read_mark, write_mark
    from flowcast.house.runlock import take_run_lock

    (tmp_path / "idle.flo").write_text("house idle\nframer idle be active first rest\n  frame rest\n    print resting\n")
    path = tmp_path / "abc.yaml"
    path.write_text("estate: abc\nhouses:\n  - {name: manor, flow: idle.flo, manor: true}\ncast:\n")
    layout = load_layout(path)
    cache = Cache.open(layout.cast.cache_path, estate="abc")
    for i in range(10):
        cache.publish(f"abc/m/{i}", b"x")
    cache.close()
    write_mark(layout.cast.cache_path, "abc", 25)  # as if seqs 11..25 were committed, then lost
    code, _, err = run(capsys, "stats", path)
    assert code == 3 and "lost committed messages" in err and err.count("\n") == 1
    lock = take_run_lock(layout.run / "supervisor.lock")  # the estate is running: refused, nothing touched
    try:
        code, _, err = run(capsys, "accept-loss", path)
        assert code == 1 and "stop it first" in err and read_mark(layout.cast.cache_path, "abc") == 25
    finally:
        os.close(lock)
    code, out, _ = run(capsys, "accept-loss", path)
    assert code == 0 and "accepted the loss of seq 11..25" in out
    code, out, _ = run(capsys, "stats", path, "--json")
    assert code == 0 and json.loads(out)["high_seq"] == 25 and json.loads(out)["messages"] == 10
    code, out, _ = run(capsys, "accept-loss", path)
    assert code == 0 and "nothing lost" in out
