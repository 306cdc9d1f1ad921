"""Causal mailbox and relay events reach the Parquet export and read back (docs/export.md "Causal events").

A stand-in service holds the real hook set (causal.hooks.HOOKS) and a real
Mailbox on a scripted clock, so the buffered entries, the releases and
their lag are the mailbox's own; the hooks are fired by hand as the
service fires them.
"""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowcast.causal.hooks import HOOKS
from flowcast.causal.mailbox import BUFFERED, Mailbox
from flowcast.export import read_segments
from flowcast.export.recorder import Recorder
from flowcast.export.schema import CAUSAL_KINDS, SCHEMA, SCHEMA_VERSION, VERSION_KEY
from flowcast.transport.hooks import Hooks

ALICE, BOB = b"\xa1" * 32, b"\xb0" * 32
A1, A2, B1, GONE = b"\x01" * 32, b"\x02" * 32, b"\x03" * 32, b"\x0f" * 32
RECORDED_HOOKS = ("buffered", "delivered", "rejected", "abandoned", "equivocation", "fetched")


class Stand:
    """What a CausalService offers a recorder: ``hooks``, fired here by hand; a mailbox on a scripted clock."""

    def __init__(self) -> None:
        self.hooks = Hooks(HOOKS, "causal", direct=False)
        self.now = 0.0
        self.sub = SimpleNamespace(topic="chat", into="chat.inbox", name="log")
        self.mailbox = Mailbox(clock=lambda: self.now)

    def clock(self) -> float:
        return self.now

    def offer(self, hash: bytes, publisher: bytes, deps: tuple[bytes, ...] = (), seq: int = 0) -> str:
        status, ready = self.mailbox.offer(hash, publisher, 0, deps, seq)
        if status == BUFFERED and self.hooks.buffered is not None:  # a hook is None with nobody listening
            self.hooks.buffered(self.sub, self.mailbox.buffered[hash])
        for r in ready:
            if self.hooks.delivered is not None:
                self.hooks.delivered(self.sub, r)
        return status


def _rows(paths) -> list[dict]:
    table, skipped = read_segments(list(paths))
    assert skipped == []
    return [r for r in table.to_pylist() if r["kind"].startswith("causal-")]


def test_every_causal_event_is_recorded_with_topic_publisher_and_hash(tmp_path) -> None:
    stand = Stand()
    rec = Recorder(tmp_path, estate="beta", house="main", clock=stand.clock, epoch=0.0)
    rec.watch_causal(stand)
    stand.now = 10.0
    assert stand.offer(A2, ALICE, (A1,), seq=7) == BUFFERED  # waits for alice's first
    assert stand.offer(B1, BOB, (A2, GONE), seq=8) == BUFFERED
    stand.now = 12.5
    stand.offer(A1, ALICE, seq=9)  # delivers A1 at once, then releases A2 after 2.5 s
    stand.now = 13.0
    stand.hooks.fetched("chat", A1, "alpha", 2.25)
    stand.hooks.rejected(stand.sub, "chat", b"\x04" * 32, BOB, "predicate: rude")
    stand.hooks.rejected(None, "chat", b"\x05" * 32, None, "bad_dep_signature")  # the relay's own verdict
    stand.hooks.equivocation("chat", BOB, b"\x06" * 32, b"\x07" * 32)
    missing = stand.mailbox.missing_of(stand.mailbox.buffered[B1])  # A2 came: only GONE is left
    (entry,) = stand.mailbox.close_epoch(0)
    stand.hooks.abandoned(stand.sub, entry, missing)
    rows = _rows(rec.close())

    assert [r["kind"] for r in rows] == [
        "causal-buffered", "causal-buffered", "causal-delivered", "causal-delivered", "causal-fetched",
        "causal-rejected", "causal-rejected", "causal-equivocation", "causal-abandoned",
    ]
    assert {r["kind"] for r in rows} == set(CAUSAL_KINDS)
    assert all(r["schema_version"] == SCHEMA_VERSION == 3 and r["topic"] == "chat" for r in rows)
    b1, b2, d1, d2, fetched, rude, relay, equiv, gone = rows
    assert (b1["msg_id"], b1["publisher"], b1["epoch"], b1["seq"], b1["count"]) == (A2.hex(), ALICE.hex(), 0, 7, 1)
    assert (b2["msg_id"], b2["count"], b2["sub"], b2["share"]) == (B1.hex(), 2, "log", "chat.inbox")
    assert b1["stamp"] == 10.0 and b1["lag"] is None
    assert (d1["msg_id"], d1["lag"], d1["seq"], d1["stamp"]) == (A1.hex(), 0.0, 9, 12.5)
    assert (d2["msg_id"], d2["publisher"], d2["lag"], d2["seq"]) == (A2.hex(), ALICE.hex(), 2.5, 7)  # the mailbox's lag
    assert (fetched["msg_id"], fetched["remote"], fetched["latency"], fetched["publisher"]) == (A1.hex(), "alpha", 2.25, None)
    assert (rude["publisher"], rude["detail"], rude["sub"]) == (BOB.hex(), "predicate: rude", "log")
    assert (relay["publisher"], relay["detail"], relay["sub"], relay["share"]) == (None, "bad_dep_signature", None, None)
    assert (equiv["msg_id"], equiv["detail"], equiv["publisher"]) == ((b"\x07" * 32).hex(), (b"\x06" * 32).hex(), BOB.hex())
    assert (gone["msg_id"], gone["publisher"], gone["count"], gone["detail"]) == (B1.hex(), BOB.hex(), 1, GONE.hex())
    assert all(r["src"] is None and r["dst"] is None for r in rows)  # not transport hops: the loss job must not see them


def test_causal_rows_mixed_with_other_shapes_in_one_batch_keep_their_columns(tmp_path) -> None:
    stand = Stand()
    rec = Recorder(tmp_path, estate="beta", house="main", clock=stand.clock, batch=100)
    rec.watch_causal(stand)
    rec.message("sent", "m1", "a", "b", 3)
    rec.cast("cast-delivered", "c1", "alpha", seq=4, sub="00", name="n")
    stand.offer(A1, ALICE, seq=1)
    rec.presence("alpha", "joined")
    rows = {r["kind"]: r for r in read_segments(rec.close())[0].to_pylist()}
    assert set(rows) == {"sent", "cast-delivered", "causal-delivered", "presence"}
    assert (rows["causal-delivered"]["publisher"], rows["causal-delivered"]["seq"]) == (ALICE.hex(), 1)
    assert rows["cast-delivered"]["publisher"] is None and rows["cast-delivered"]["seq"] == 4
    assert rows["sent"]["topic"] is None and rows["sent"]["size"] == 3


def test_an_unknown_kind_is_refused_and_close_takes_the_listeners_off(tmp_path) -> None:
    stand = Stand()
    rec = Recorder(tmp_path, estate="beta", house="main", clock=stand.clock)
    with pytest.raises(ValueError, match="unknown causal event kind"):
        rec.causal("causal-bogus", None, "chat", None)
    rec.watch_causal(stand)
    assert all(getattr(stand.hooks, name) is not None for name in RECORDED_HOOKS)
    rec.close()
    assert all(getattr(stand.hooks, name) is None for name in stand.hooks.names)
    stand.offer(A1, ALICE)  # nothing hears it, nothing fails
    assert rec.after_close == 0


def test_a_service_attached_after_the_recorder_exists_is_followed_once(tmp_path) -> None:
    """A CausalService attaches itself to the house after ``flowcast run --export`` made its recorder."""
    stand = Stand()
    rec = Recorder(tmp_path, estate="beta", house="main", clock=stand.clock)
    house = SimpleNamespace(causal=None)
    chore = rec.follow_causal(house)
    chore()
    assert stand.hooks.delivered is None
    house.causal = stand
    chore()
    chore()  # one watch, not one a tick
    assert len(stand.hooks.listeners("delivered")) == 1
    stand.offer(A1, ALICE)
    assert [r["kind"] for r in _rows(rec.close())] == ["causal-delivered"]
    assert stand.hooks.delivered is None


def test_watch_house_finds_a_causal_service_already_attached(tmp_path) -> None:
    stand = Stand()
    rec = Recorder(tmp_path, estate="beta", house="main", clock=stand.clock)
    house = SimpleNamespace(built=SimpleNamespace(logged=[], store=None), cast=None, causal=stand)
    rec.watch_house(house)
    chore = rec.follow_causal(house)
    chore()  # watch_house did it already: no second listener
    assert len(stand.hooks.listeners("buffered")) == 1
    rec.close()


def test_a_version_2_segment_still_reads_with_the_causal_columns_as_nulls(tmp_path) -> None:
    """Version 3 only added columns and kinds: files written before it read as they were."""
    rec = Recorder(tmp_path, estate="alpha", house="h", clock=lambda: 1.0)
    rec.cast("cast-stored", "c1", None, seq=1, name="alpha/news/1")
    (path,) = rec.close()
    old = pq.read_table(path).drop_columns(["topic", "publisher", "epoch"])
    old = old.set_column(0, "schema_version", pa.array([2], pa.int16()))
    pq.write_table(old.replace_schema_metadata({VERSION_KEY: b"2"}), path)
    (row,) = read_segments([path])[0].to_pylist()
    assert (row["schema_version"], row["kind"], row["seq"], row["name"]) == (2, "cast-stored", 1, "alpha/news/1")
    assert [row[c] for c in ("topic", "publisher", "epoch")] == [None] * 3
    assert read_segments([path])[0].schema == SCHEMA


def test_a_real_causal_service_on_the_simulated_network_records_what_its_mailbox_did(tmp_path) -> None:
    """End to end: a relay and mailbox at gamma, messages arriving out of order from alpha, every hook firing."""
    from tests.causal.kit import TOPIC
    from tests.export.causalrun import causal_run

    run = causal_run(tmp_path / "causal", tmp_path / "live")
    rows = _rows(run.paths)

    def one(kind: str, msg) -> dict:
        (row,) = [r for r in rows if r["kind"] == kind and r["msg_id"] == msg.hash.hex()]
        return row

    assert {r["kind"] for r in rows} == set(CAUSAL_KINDS)
    assert all(r["topic"] == TOPIC for r in rows)
    waited = one("causal-buffered", run.second)
    assert (waited["publisher"], waited["count"], waited["sub"], waited["share"]) == (run.alpha, 1, run.sub.name, "inbox")
    fetched = one("causal-fetched", run.first)
    assert fetched["remote"] == "alpha" and 0.039 <= fetched["latency"] <= 10  # a round trip at least
    released = one("causal-delivered", run.second)
    assert released["lag"] == pytest.approx(run.delivered[run.second.hash.hex()]["lag"]) and released["lag"] >= 0.039
    assert released["stamp"] - waited["stamp"] == pytest.approx(released["lag"], abs=1e-6)  # the mailbox's clock is the house's
    assert [r["msg_id"] for r in rows if r["kind"] == "causal-delivered"] == [
        run.first.hash.hex(), run.second.hash.hex(), run.fork.hash.hex(), run.genesis.hash.hex()]  # as the queue got them
    assert list(run.delivered) == [r["msg_id"] for r in rows if r["kind"] == "causal-delivered"]
    assert one("causal-delivered", run.first)["lag"] == 0.0
    rude = one("causal-rejected", run.rude)
    assert (rude["detail"], rude["sub"], rude["publisher"]) == ("rude", run.sub.name, run.alpha)
    assert one("causal-equivocation", run.fork)["detail"] == run.rude.hash.hex()
    gone = one("causal-abandoned", run.stuck)
    assert (gone["count"], gone["detail"], gone["epoch"], gone["publisher"]) == (1, run.ghost.hash.hex(), 0, run.gamma)
