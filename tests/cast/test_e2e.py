"""End to end over CAST (docs/cast.md, "End to end"): contacts, sealed content, what the estates can see."""

from __future__ import annotations

import msgpack
import pytest

from flowcast.cast.e2e import ContactError
from flowcast.cast.identity import UserKeys
from flowcast.cast.ids import new_id
from flowcast.cast.sealing import card, seal
from tests.cast.e2ekit import Estates, bodies

SECRET = b"the eagle lands at nine"


@pytest.fixture
def w(tmp_path):
    w = Estates(tmp_path)
    w.follow_all()
    return w


def _contacts(w, alice, bob):
    """alice@abc asks, bob@xyz accepts, alice learns it."""
    assert w.done(alice.request(bob.address))
    assert w.run_until(lambda: bob.pending(), 20)
    assert [c.peer for c in bob.pending()] == [alice.address]
    assert w.done(bob.accept(alice.address))
    assert w.run_until(lambda: alice.contact(bob.address).state == "accepted", 20)


def _sealed_publish(w, estate, keys, to, peer_box, body, *, name=None, id=None, tamper=None):
    """Publish content as ``keys``'s estate would, with the hand of an attacker on the bytes (``tamper``)."""
    id = id or new_id()
    name = name or f"{estate}/messages/{keys.user}/{id.hex()}"
    data = seal(keys, to, peer_box, name, id, body)
    if tamper is not None:
        data = tamper(data, name, id)
    return w.homes[estate].publish(name, data, id=id, publisher=keys.user, recipients=[to])


def test_contact_then_sealed_messages_both_ways_and_neither_estate_ever_holds_the_plaintext(w, tmp_path):
    alice, bob = w.e2e["abc"].user("alice"), w.e2e["xyz"].user("bob")
    _contacts(w, alice, bob)
    assert not bob.held() and not alice.held()
    assert bob.contact(alice.address).box == bytes(alice.keys.public_key)
    assert alice.contact(bob.address).verify == bytes(bob.keys.verify_key)
    sent = [alice.send(bob.address, SECRET + b" #%d" % i) for i in range(5)]
    reply = bob.send(alice.address, b"roger " + SECRET)
    assert w.done(*sent, reply)
    assert w.run_until(lambda: len(w.mailbox("xyz", "bob").queue) == 5 and len(w.mailbox("abc", "alice").queue) == 1, 20)
    assert bodies(w.mailbox("xyz", "bob")) == [SECRET + b" #%d" % i for i in range(5)]  # in order
    assert [m["from"] for m in w.mailbox("xyz", "bob").queue] == ["alice@abc"] * 5
    assert bodies(w.mailbox("abc", "alice")) == [b"roger " + SECRET]
    # a control, so the checks below can fail: plain content published the same way is visible
    control = w.homes["abc"].publish("abc/plain/alice/control", b"CONTROL " + SECRET[:9], publisher="alice", recipients=["bob@xyz"])
    assert w.done(control)
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*.sqlite3*"))  # caches, inboxes, contacts
    wire = w.wire()
    assert b"CONTROL " + SECRET[:9] in wire and b"CONTROL " + SECRET[:9] in stored
    assert SECRET not in wire and SECRET not in stored  # what the estates carry and keep: no content
    rows = w.caches["abc"].read(0, pattern="abc/messages/**")
    assert len(rows) == 5 and all(SECRET not in row.data for row in rows)
    assert {row.recipients for row in rows} == {("bob@xyz",)}  # what the estate sees: routing metadata
    assert not w.e2e["xyz"].refusals and not w.e2e["abc"].refusals
    status = w.e2e["xyz"].status()
    assert status["users"] == {"bob": {"pending": 0, "held": 0}} and status["counts"]["delivered"] == 5


def test_content_from_a_sender_not_accepted_is_held_counted_and_durable_then_delivered_in_order_on_accept(w, tmp_path):
    bob = w.e2e["xyz"].user("bob")
    eve = w.e2e["abc"].user("eve")
    assert w.done(eve.request("bob@xyz"))
    # eve learned bob's public keys elsewhere and writes before bob has said yes
    w.e2e["abc"].contacts.put("eve", "bob@xyz", "accepted", bytes(bob.keys.verify_key), bytes(bob.keys.public_key), 0.0)
    early = [eve.send("bob@xyz", b"early %d" % i) for i in range(3)]
    assert w.done(*early)
    assert w.run_until(lambda: len(bob.held()) == 3, 20)
    assert not w.mailbox("xyz", "bob").queue  # not shown to bob
    assert w.e2e["xyz"].counts["held"] == 3 and [c.peer for c in bob.pending()] == ["eve@abc"]
    assert [h.peer for h in bob.held()] == ["eve@abc"] * 3 and all(b"early" not in h.data for h in bob.held())
    # held content outlives the house: the store is on disk
    from flowcast.cast.contacts import Contacts
    again = Contacts(tmp_path / "xyz" / "cast" / "contacts.sqlite3")
    assert len(again.held("bob")) == 3
    again.close()
    assert w.done(bob.accept("eve@abc"))
    assert bodies(w.mailbox("xyz", "bob")) == [b"early 0", b"early 1", b"early 2"] and not bob.held()
    assert w.done(eve.send("bob@xyz", b"live"))
    assert w.run_until(lambda: len(w.mailbox("xyz", "bob").queue) == 4, 20)
    assert bodies(w.mailbox("xyz", "bob"))[-1] == b"live" and w.e2e["xyz"].counts["released"] == 3


def test_an_acceptance_that_comes_after_the_content_releases_it(w):
    """bob accepts and writes at once; alice's house hears his messages before his acceptance."""
    alice, bob = w.e2e["abc"].user("alice"), w.e2e["xyz"].user("bob")
    for sub in list(w.e2e["abc"].follows):
        if sub.pattern == "xyz/contacts/**":
            sub.close()
    assert w.done(alice.request(bob.address))
    assert w.run_until(lambda: bob.pending(), 20)
    assert w.done(bob.accept(alice.address), *[bob.send(alice.address, b"hi %d" % i) for i in range(3)])
    assert w.run_until(lambda: len(alice.held()) == 3, 20)
    assert not w.mailbox("abc", "alice").queue and alice.contact(bob.address).state == "requested"
    w.homes["abc"].subscribe("xyz/contacts/**", into="e2e.in")  # resumes from its cursor: bob's acceptance comes
    assert w.run_until(lambda: len(w.mailbox("abc", "alice").queue) == 3, 20)
    assert bodies(w.mailbox("abc", "alice")) == [b"hi 0", b"hi 1", b"hi 2"] and alice.contact(bob.address).state == "accepted"


def test_tampered_or_wrongly_keyed_content_is_refused_with_a_reason_and_counted_never_delivered(w):
    alice, bob = w.e2e["abc"].user("alice"), w.e2e["xyz"].user("bob")
    _contacts(w, alice, bob)
    mallory = UserKeys.generate("alice", "abc")  # claims to be alice, has her name but not her key

    def flip(data, _name, _id):
        outer = msgpack.unpackb(data)
        box = bytearray(outer["box"])
        box[-1] ^= 1
        outer["box"] = bytes(box)
        return msgpack.packb(outer)

    bob_box = bytes(bob.keys.public_key)
    bad = [_sealed_publish(w, "abc", alice.keys, "bob@xyz", bob_box, b"tampered " + SECRET, tamper=flip),
           _sealed_publish(w, "abc", mallory, "bob@xyz", bob_box, b"forged " + SECRET)]
    good = alice.send(bob.address, b"genuine")
    assert w.done(*bad, good)
    assert w.run_until(lambda: len(w.mailbox("xyz", "bob").queue) == 1, 20)
    w.world.run_for(2)
    assert bodies(w.mailbox("xyz", "bob")) == [b"genuine"]
    counts = w.e2e["xyz"].counts
    assert counts["refused_bad_box"] == 2 and counts["delivered"] == 1
    assert [r["reason"] for r in w.e2e["xyz"].refusals] == ["bad_box", "bad_box"]
    assert "does not open" in w.e2e["xyz"].refusals[0]["detail"]


def test_a_sealed_message_republished_under_another_name_or_id_is_refused_as_replayed(w):
    alice, bob = w.e2e["abc"].user("alice"), w.e2e["xyz"].user("bob")
    _contacts(w, alice, bob)
    first = alice.send(bob.address, b"pay bob 10")
    assert w.done(first)
    stored = w.caches["abc"].read(0, pattern="abc/messages/**")[0]
    assert w.run_until(lambda: len(w.mailbox("xyz", "bob").queue) == 1, 20)
    # the estate abc stores alice's box and publishes it again: a new id, then a new name too
    again_id = new_id()
    replays = [w.homes["abc"].publish(stored.name.rsplit("/", 1)[0] + "/" + again_id.hex(), stored.data, id=again_id, publisher="alice", recipients=["bob@xyz"]),
               w.homes["abc"].publish("abc/messages/alice/other", stored.data, id=new_id(), publisher="alice", recipients=["bob@xyz"])]
    assert w.done(*replays)
    assert w.run_until(lambda: w.e2e["xyz"].counts["refused_replayed"] == 2, 20)
    assert bodies(w.mailbox("xyz", "bob")) == [b"pay bob 10"]


def test_forged_contact_cards_are_refused_bad_signature_and_leave_nothing_pending(w):
    bob = w.e2e["xyz"].user("bob")
    alice = w.e2e["abc"].user("alice")
    mallory = UserKeys.generate("alice", "abc")

    def publish(data, id, name=None):
        name = name or f"abc/contacts/alice/{id.hex()}"
        return w.homes["abc"].publish(name, data, id=id, publisher="alice", recipients=["bob@xyz"])

    id1 = new_id()
    swapped = msgpack.unpackb(card("request", alice.keys, "bob@xyz", f"abc/contacts/alice/{id1.hex()}", id1))
    swapped["box"] = bytes(mallory.public_key)  # alice's signature, mallory's box key
    id2, id3 = new_id(), new_id()
    moved = card("request", alice.keys, "bob@xyz", f"abc/contacts/alice/{id2.hex()}", id2)  # signed for another id
    tickets = [publish(msgpack.packb(swapped), id1), publish(moved, id3)]
    assert w.done(*tickets)
    assert w.run_until(lambda: w.e2e["xyz"].counts["refused_bad_signature"] == 2, 20)
    assert not bob.pending() and not bob.held()
    with pytest.raises(ContactError) as caught:
        bob.accept("alice@abc")
    assert caught.value.reason == "no_request"


def test_malformed_misaddressed_and_unsolicited_content_is_counted_and_the_stream_goes_on(w):
    alice, bob = w.e2e["abc"].user("alice"), w.e2e["xyz"].user("bob")
    home = w.homes["abc"]
    junk = [
        (b"\xc1 not msgpack", "malformed"),
        (msgpack.packb([1, 2]), "malformed"),
        (msgpack.packb({"v": 1, "k": "msg", "from": "alice@abc", "to": "bob@xyz", "box": "text"}), "not_accepted_yet"),
        (msgpack.packb({"v": 1, "k": "msg", "from": "carol@abc", "to": "bob@xyz", "box": b"x"}), "forged_sender"),
        (msgpack.packb({"v": 1, "k": "msg", "from": "alice@abc", "to": "nobody@xyz", "box": b"x"}), "not_here"),
        (card("accept", alice.keys, "bob@xyz", "abc/contacts/alice/x", b"\0" * 16), "unsolicited"),
    ]
    tickets = []
    for data, what in junk:
        id = new_id()
        kind = "contacts" if what == "unsolicited" else "messages"
        name = f"abc/{kind}/alice/{id.hex()}"
        if what == "unsolicited":
            data = card("accept", alice.keys, "bob@xyz", name, id)
        tickets.append(home.publish(name, data, id=id, publisher="alice", recipients=["bob@xyz"]))
    assert w.done(*tickets)
    counts = w.e2e["xyz"].counts
    assert w.run_until(lambda: sum(v for k, v in counts.items() if k.startswith("refused_")) == 5, 20)
    assert counts["refused_malformed"] == 2 and counts["refused_forged_sender"] == 1
    assert counts["refused_not_here"] == 1 and counts["refused_unsolicited"] == 1
    assert counts["held"] == 1  # well-formed content of a stranger: held, not opened, not dropped
    _contacts(w, alice, bob)  # the stream goes on
    assert w.done(alice.send(bob.address, b"after"))
    assert w.run_until(lambda: bodies(w.mailbox("xyz", "bob"))[-1:] == [b"after"], 20)
    assert counts["refused_malformed"] == 3  # the held junk did not open on acceptance: refused then, with its reason


def test_a_changed_key_is_refused_and_a_refused_contact_loses_its_held_content_counted(w):
    alice, bob = w.e2e["abc"].user("alice"), w.e2e["xyz"].user("bob")
    _contacts(w, alice, bob)
    impostor = UserKeys.generate("alice", "abc")
    id = new_id()
    name = f"abc/contacts/alice/{id.hex()}"
    assert w.done(w.homes["abc"].publish(name, card("request", impostor, "bob@xyz", name, id), id=id, publisher="alice", recipients=["bob@xyz"]))
    assert w.run_until(lambda: w.e2e["xyz"].counts["refused_key_changed"] == 1, 20)
    assert bob.contact(alice.address).box == bytes(alice.keys.public_key)
    eve = w.e2e["abc"].user("eve")
    w.e2e["abc"].contacts.put("eve", "bob@xyz", "accepted", bytes(bob.keys.verify_key), bytes(bob.keys.public_key), 0.0)
    assert w.done(eve.send("bob@xyz", b"spam 1"), eve.send("bob@xyz", b"spam 2"))
    assert w.run_until(lambda: len(bob.held("eve@abc")) == 2, 20)
    assert bob.refuse("eve@abc") == 2 and not bob.held()
    assert w.done(eve.send("bob@xyz", b"spam 3"))
    assert w.run_until(lambda: w.e2e["xyz"].counts["refused_contact_refused"] == 1, 20)
    assert not w.mailbox("xyz", "bob").queue and w.e2e["xyz"].counts["discarded"] == 2
    with pytest.raises(ContactError) as caught:
        alice.send("carol@xyz", b"x")
    assert caught.value.reason == "not_accepted"
    for user, peer, reason in (("nobody", "bob@xyz", "no_user"), ("../x", "bob@xyz", "bad_address"), ("alice", "bob", "bad_address")):
        with pytest.raises(ContactError) as caught:
            w.e2e["abc"].send(user, peer, b"x")
        assert caught.value.reason == reason


def test_abc_forwards_to_an_estate_only_public_messages_and_those_for_its_users(tmp_path):
    """Privacy (item 8): a wide subscription at xyz gets its own and public ones; qrs's stay at abc."""
    w = Estates(tmp_path, ("abc", "xyz", "qrs"))
    for estate in ("xyz", "qrs"):
        assert w.homes[estate].subscribe("abc/messages/**", into="raw").state == "pending"
    alice = w.e2e["abc"].user("alice")
    bob, carol = w.e2e["xyz"].user("bob"), w.e2e["qrs"].user("carol")
    plan = [("for bob", ["bob@xyz"]), ("for carol", ["carol@qrs"]), ("public", None), ("for qrs", ["qrs"]),
            ("for both", ["bob@xyz", "carol@qrs"]), ("for carol again", ["carol@qrs"])]
    tickets = [w.homes["abc"].publish(f"abc/messages/alice/{i}", body.encode(), publisher="alice", recipients=to)
               for i, (body, to) in enumerate(plan)]
    assert w.done(*tickets)
    raw = {e: w.estates[e].store("home").queue("raw") for e in ("xyz", "qrs")}
    assert w.run_until(lambda: len(raw["xyz"].queue) == 3 and len(raw["qrs"].queue) == 5, 20)
    w.world.run_for(3)
    assert [m["data"] for m in raw["xyz"].queue] == [b"for bob", b"public", b"for both"]
    assert [m["data"] for m in raw["qrs"].queue] == [b"for carol", b"public", b"for qrs", b"for both", b"for carol again"]
    held = {h["estate"]: h for h in w.pubs["abc"].status()["held"]}
    assert held["xyz"]["sent"] == held["qrs"]["sent"]  # xyz's read moved past carol's messages without them
    assert bob and carol and alice


def test_content_the_contacts_store_failed_to_hold_waits_and_is_held_on_the_next_arrival(w):
    import sqlite3

    bob, eve = w.e2e["xyz"].user("bob"), w.e2e["abc"].user("eve")
    w.e2e["abc"].contacts.put("eve", "bob@xyz", "accepted", bytes(bob.keys.verify_key), bytes(bob.keys.public_key), 0.0)
    contacts = w.e2e["xyz"].contacts
    hold, failures = contacts.hold, []

    def full_disk_once(*args):
        if not failures:
            failures.append(args)
            raise sqlite3.OperationalError("database or disk is full")
        return hold(*args)

    contacts.hold = full_disk_once
    assert w.done(eve.send("bob@xyz", b"first"))
    assert w.run_until(lambda: w.e2e["xyz"].counts["store_failed"] == 1, 20)
    assert not bob.held() and len(w.estates["xyz"].store("home").queue("e2e.in").queue) == 1  # kept, not lost
    assert w.done(eve.send("bob@xyz", b"second"))
    assert w.run_until(lambda: len(bob.held()) == 2, 20)
    assert [h.name for h in bob.held()][0] == failures[0][2]  # the one that waited comes first


def test_two_users_who_ask_each_other_at_once_are_both_contacts(w):
    alice, bob = w.e2e["abc"].user("alice"), w.e2e["xyz"].user("bob")
    assert w.done(alice.request(bob.address), bob.request(alice.address))
    assert w.run_until(lambda: alice.contact(bob.address).state == bob.contact(alice.address).state == "accepted", 20)
    assert not alice.pending() and not bob.pending()
    assert w.done(alice.send(bob.address, b"hello"), bob.send(alice.address, b"hi"))
    assert w.run_until(lambda: bodies(w.mailbox("xyz", "bob")) == [b"hello"] and bodies(w.mailbox("abc", "alice")) == [b"hi"], 20)


def test_a_body_over_the_size_limit_is_refused_at_once_and_a_gap_is_counted_not_taken_for_content(w):
    from flowcast.cast.wire import MAX_MESSAGE
    from flowcast.routing import Refused

    alice, bob = w.e2e["abc"].user("alice"), w.e2e["xyz"].user("bob")
    _contacts(w, alice, bob)
    with pytest.raises(Refused) as caught:
        alice.send(bob.address, bytes(MAX_MESSAGE))
    assert caught.value.kind == "too_large" and w.e2e["abc"].counts["sent"] == 0
    with pytest.raises(TypeError):
        alice.send(bob.address, "text")
    inbox = w.estates["xyz"].store("home").queue("e2e.in")
    inbox.push({"route": {}, "tag": "cast.gap", "stamp": 0.0, "data": {"from": 3, "upto": 9}})
    assert w.e2e["xyz"].gaps == [(3, 9)] and w.e2e["xyz"].counts["gaps"] == 1 and not inbox.queue
    assert not w.mailbox("xyz", "bob").queue and not w.e2e["xyz"].refusals
