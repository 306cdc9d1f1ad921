"""User keys and the contacts store: kept private, kept across restarts, refused when broken, never replaced."""

from __future__ import annotations

import stat

import pytest

from flowcast.cast.contacts import Contacts, ContactsCorrupt
from flowcast.cast.identity import IdentityError, UserKeys, check_address
from tests.cast.e2ekit import Estates, bodies


def test_keys_are_written_0600_in_a_0700_directory_and_read_back_the_same(tmp_path):
    made = UserKeys.load_or_create(tmp_path, "alice", "abc")
    path = UserKeys.path(tmp_path, "alice")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    again = UserKeys.load_or_create(tmp_path, "alice", "abc")
    assert bytes(again.signing) == bytes(made.signing) and bytes(again.box) == bytes(made.box)
    assert again.address == "alice@abc" and bytes(made.signing) != bytes(made.box)
    from flowcast.cast.e2e import fingerprint
    print_ = fingerprint(bytes(made.verify_key), bytes(made.public_key))
    assert print_ == fingerprint(bytes(again.verify_key), bytes(again.public_key)) and len(print_) == 20
    other = UserKeys.generate("alice", "abc")
    assert fingerprint(bytes(other.verify_key), bytes(other.public_key)) != print_


def test_a_broken_key_file_is_refused_not_replaced_and_names_cannot_become_paths(tmp_path):
    UserKeys.load_or_create(tmp_path, "alice", "abc")
    path = UserKeys.path(tmp_path, "alice")
    path.write_bytes(b"short")
    with pytest.raises(IdentityError, match="64 bytes"):
        UserKeys.load_or_create(tmp_path, "alice", "abc")
    assert path.read_bytes() == b"short"
    for bad in ("../alice", "a/b", "", "..", "a@b", "x" * 65, 7):
        with pytest.raises(IdentityError):
            UserKeys.load_or_create(tmp_path, bad, "abc")
    for bad in ("alice", "alice@", "@abc", "a@b@c", "alice@a/b"):
        with pytest.raises(IdentityError):
            check_address(bad)
    assert check_address("alice@abc") == ("alice", "abc")


def test_a_contacts_file_that_cannot_be_read_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "contacts.sqlite3"
    path.write_bytes(b"this is not a database, it is a file someone broke" * 100)
    with pytest.raises(ContactsCorrupt, match="contacts.sqlite3"):
        Contacts(path)
    assert path.read_bytes().startswith(b"this is not")


def test_contacts_and_keys_outlive_the_end_to_end_layer_and_a_new_one_on_the_same_dir_takes_over(tmp_path):
    w = Estates(tmp_path)
    w.follow_all()
    alice, bob = w.e2e["abc"].user("alice"), w.e2e["xyz"].user("bob")
    assert w.done(alice.request(bob.address))
    assert w.run_until(lambda: bob.pending(), 20)
    assert w.done(bob.accept(alice.address))
    assert w.run_until(lambda: alice.contact(bob.address).state == "accepted", 20)
    # bob's end-to-end layer goes away; alice writes meanwhile; a new one on the same estate dir comes back
    for sub in w.e2e["xyz"].follows:
        sub.close()
    w.e2e["xyz"].close()
    assert w.done(*[alice.send(bob.address, b"while away %d" % i) for i in range(3)])
    from flowcast.cast.e2e import EndToEnd
    back = EndToEnd(w.homes["xyz"], tmp_path / "xyz")
    back.follow("abc")  # resumes from the cursors in the inbox
    # bob's keys are loaded from disk when his content arrives, before anyone asks for him
    assert w.run_until(lambda: len(w.mailbox("xyz", "bob").queue) == 3, 20)
    assert bodies(w.mailbox("xyz", "bob")) == [b"while away %d" % i for i in range(3)]
    assert back.contacts.get("bob", "alice@abc").state == "accepted" and not back.refusals


@pytest.mark.parametrize("seed", range(4))
def test_over_a_lossy_duplicating_reordering_network_each_message_opens_once_in_order(tmp_path, seed):
    w = Estates(tmp_path, seed=seed, loss=0.1, duplicate=0.02, reorder=0.05, delay=(0.001, 0.01))
    w.follow_all()
    alice, bob = w.e2e["abc"].user("alice"), w.e2e["xyz"].user("bob")
    assert w.done(alice.request(bob.address))
    assert w.run_until(lambda: bob.pending(), 60)
    assert w.done(bob.accept(alice.address))
    assert w.run_until(lambda: alice.contact(bob.address).state == "accepted", 60)
    assert w.done(*[alice.send(bob.address, b"n%03d" % i) for i in range(100)])
    assert w.run_until(lambda: len(w.mailbox("xyz", "bob").queue) >= 100, 120)
    w.world.run_for(5)
    assert bodies(w.mailbox("xyz", "bob")) == [b"n%03d" % i for i in range(100)]
    assert not w.e2e["xyz"].refusals
