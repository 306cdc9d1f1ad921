"""Keep files, permissions, policies, and the ``flowcast keys`` command."""

from __future__ import annotations

import os
import stat

import pytest

from flowcast.transport.crypto import LongTermKeys, ReplayWindow, fingerprint, open_sealed, seal
from flowcast.transport.keep import Acceptance, Keep, KeepError, RemoteRecord, Status, validate_name
from flowcast.transport.keycli import main
from flowcast.transport.wire import WireError, pack_header, unpack_header


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_keep_files_are_private_and_survive_reopening(tmp_path):
    keep = Keep(tmp_path / "k")
    local = keep.create_local("alpha", "main", 1)
    other = LongTermKeys.generate()
    verdict = keep.admit("beta", "worker", 0, other.verkey, other.pubkey, Acceptance.ONCE)
    assert verdict.status is Status.ACCEPTED
    assert _mode(tmp_path / "k") == 0o700 and _mode(tmp_path / "k" / "remotes") == 0o700
    for file in (tmp_path / "k").rglob("*.json"):
        assert _mode(file) == 0o600
    assert (tmp_path / "k" / "remotes" / f"{other.fingerprint}.json").exists()
    again = Keep(tmp_path / "k")
    assert again.local().keys == local.keys and again.local().role == "main"
    assert again.get(other.fingerprint).name == "beta"


@pytest.mark.parametrize("bad", ["", "..", "a/b", "a b", "x" * 65, "\x00", "../x", ".hidden", 7, None])
def test_bad_names_are_refused_with_a_reason(bad):
    with pytest.raises(KeepError) as info:
        validate_name(bad)
    assert "name" in str(info.value)


def test_policies_never_once_always():
    keep = Keep(None)
    first, second = LongTermKeys.generate(), LongTermKeys.generate()
    assert keep.admit("x", "r", 0, first.verkey, first.pubkey, Acceptance.NEVER).status is Status.PENDING
    assert keep.admit("x", "r", 0, first.verkey, first.pubkey, Acceptance.ALWAYS).status is Status.ACCEPTED
    verdict = keep.admit("x", "r", 0, second.verkey, second.pubkey, Acceptance.ONCE)
    assert verdict.status is Status.REJECTED and "pinned" in verdict.reason and verdict.events
    # a bound name never moves to a new key, whatever the policy
    assert keep.admit("x", "r", 0, second.verkey, second.pubkey, Acceptance.ALWAYS).status is Status.REJECTED
    keep.set_status(first.fingerprint, Status.REJECTED)
    assert keep.admit("x", "r", 0, first.verkey, first.pubkey, Acceptance.ALWAYS).status is Status.REJECTED


def test_keys_command(tmp_path, capsys):
    keep_dir = str(tmp_path / "keep")
    assert main(["--keep", keep_dir, "new", "alpha", "--role", "main"]) == 0
    assert main(["--keep", keep_dir, "new", "alpha"]) == 1
    assert main(["--keep", keep_dir, "show"]) == 0
    shown = capsys.readouterr().out
    assert "alpha" in shown and "fingerprint" in shown
    other = LongTermKeys.generate()
    Keep(keep_dir).admit("beta", "w", 0, other.verkey, other.pubkey, Acceptance.NEVER)
    assert main(["--keep", keep_dir, "list", "--status", "pending"]) == 0
    assert other.fingerprint in capsys.readouterr().out
    assert main(["--keep", keep_dir, "accept", "beta"]) == 0
    assert Keep(keep_dir).get(other.fingerprint).status is Status.ACCEPTED
    assert main(["--keep", keep_dir, "reject", other.fingerprint[:8]]) == 0
    assert Keep(keep_dir).get(other.fingerprint).status is Status.REJECTED
    assert main(["--keep", keep_dir, "forget", other.fingerprint]) == 0
    assert Keep(keep_dir).get(other.fingerprint) is None
    assert main(["--keep", keep_dir, "forget", "nobody"]) == 1
    assert "no remote" in capsys.readouterr().err
    assert sorted(os.listdir(keep_dir)) == ["local.json", "remotes"]


def test_header_codec_and_sealing():
    header = pack_header(8, 0, 0xDEADBEEF, 2**64 - 1)
    assert unpack_header(header) == (8, 0, 0xDEADBEEF, 2**64 - 1)
    for bad in (b"", header[:15], b"\x00" + header[1:], header[:1] + b"\xee" + header[2:]):
        with pytest.raises(WireError):
            unpack_header(bad)
    key = os.urandom(32)
    datagram = seal(key, header, b"body")
    assert open_sealed(key, datagram[:16], datagram[16:]) == b"body"
    altered = bytearray(datagram)
    altered[5] ^= 1  # a header bit: the header is authenticated as the nonce
    with pytest.raises(Exception):
        open_sealed(key, bytes(altered[:16]), bytes(altered[16:]))
    assert len(fingerprint(b"a" * 32, b"b" * 32)) == 32


def test_replay_window_accepts_each_counter_once_and_refuses_the_too_old():
    window = ReplayWindow(size=64)
    assert all(window.accept(c) for c in (5, 3, 4, 100))
    assert not window.accept(5) and not window.accept(100)
    assert not window.accept(30)  # more than 64 behind the highest: refused forever
    assert window.accept(99) and not window.accept(99)


@pytest.mark.parametrize("policy", list(Acceptance))
def test_a_bound_name_is_never_rebound_by_a_join(policy):
    """Was a finding (issue 10.2): under ``always`` a new key joined as "alpha" and took the name."""
    keep = Keep(None)
    owner, thief = LongTermKeys.generate(), LongTermKeys.generate()
    keep.add(RemoteRecord("alpha", "main", 0, owner.verkey, owner.pubkey, Status.ACCEPTED))
    verdict = keep.admit("alpha", "main", 0, thief.verkey, thief.pubkey, policy, 1.0)
    assert verdict.status is Status.REJECTED and verdict.record is None
    assert verdict.events == [f"key-changed alpha {thief.fingerprint}"]
    assert keep.get(thief.fingerprint) is None
    assert keep.bound("alpha").fingerprint == owner.fingerprint and keep.find("alpha").verkey == owner.verkey
    # the owner itself still joins as before
    assert keep.admit("alpha", "main", 0, owner.verkey, owner.pubkey, policy, 2.0).record.fingerprint == owner.fingerprint


def test_a_rejected_record_binds_no_name_and_operators_cannot_add_over_a_binding():
    keep = Keep(None)
    owner, other = LongTermKeys.generate(), LongTermKeys.generate()
    keep.add(RemoteRecord("alpha", "main", 0, owner.verkey, owner.pubkey, Status.REJECTED))
    assert keep.admit("alpha", "main", 0, other.verkey, other.pubkey, Acceptance.ALWAYS).status is Status.ACCEPTED
    with pytest.raises(KeepError, match="bound"):
        keep.set_status(owner.fingerprint, Status.ACCEPTED)
    with pytest.raises(KeepError, match="rotate"):
        keep.add(RemoteRecord("alpha", "main", 0, *_keys_of(LongTermKeys.generate()), Status.ACCEPTED))


def _keys_of(keys):
    return keys.verkey, keys.pubkey


def test_rotate_moves_a_name_to_new_keys_and_survives_reopening(tmp_path):
    keep = Keep(tmp_path / "k")
    old, new = LongTermKeys.generate(), LongTermKeys.generate()
    keep.admit("alpha", "main", 3, old.verkey, old.pubkey, Acceptance.ALWAYS, 1.0)
    gone, made = keep.rotate("alpha", new.verkey, new.pubkey)
    assert gone.fingerprint == old.fingerprint and made.fingerprint == new.fingerprint
    again = Keep(tmp_path / "k")
    assert again.get(old.fingerprint).status is Status.REJECTED  # the durable mark of the rotation
    assert again.get(old.fingerprint).note == f"rotated to {new.fingerprint}"
    record = again.find("alpha")
    assert (record.fingerprint, record.role, record.mode, record.status) == (new.fingerprint, "main", 3, Status.ACCEPTED)
    # now the old key is the stranger
    assert again.admit("alpha", "main", 3, old.verkey, old.pubkey, Acceptance.ALWAYS, 5.0).status is Status.REJECTED
    with pytest.raises(KeepError):
        again.rotate("nobody", new.verkey, new.pubkey)


def test_keys_rotate_command(tmp_path, capsys):
    keep_dir = str(tmp_path / "keep")
    old, new = LongTermKeys.generate(), LongTermKeys.generate()
    Keep(keep_dir).admit("beta", "w", 0, old.verkey, old.pubkey, Acceptance.ONCE)
    assert main(["--keep", keep_dir, "rotate", "beta", new.verkey.hex(), new.pubkey.hex()]) == 0
    assert f"rotated beta {old.fingerprint} -> {new.fingerprint}" in capsys.readouterr().out
    assert Keep(keep_dir).find("beta").fingerprint == new.fingerprint
    assert main(["--keep", keep_dir, "rotate", "beta", "zz", new.pubkey.hex()]) == 1
    assert "hex" in capsys.readouterr().err


@pytest.mark.parametrize(
    "mode, stamp, reason",
    [(True, 1.0, "mode"), (False, 1.0, "mode"), (0, float("inf"), "stamp"), (0, float("nan"), "stamp"), (0, -1.0, "stamp"), (1.5, 1.0, "mode")],
)
def test_non_conforming_join_fields_are_refused(mode, stamp, reason):
    """Was a finding (issue 10.7): joins with ``mode=True`` or ``stamp=+inf`` were accepted."""
    keep = Keep(None)
    keys = LongTermKeys.generate()
    verdict = keep.admit("x", "r", mode, keys.verkey, keys.pubkey, Acceptance.ALWAYS, stamp)
    assert verdict.status is Status.REJECTED and reason in verdict.reason and keep.remotes() == []


def test_keep_lookups_are_indexed_not_scanned():
    """Per-join look-ups must not walk every record (issue 10.1): count the walks."""

    class Counting(dict):
        walks = 0

        def values(self):
            Counting.walks += 1
            return super().values()

        def items(self):
            Counting.walks += 1
            return super().items()

    keep = Keep(None, max_remotes=50)
    keep._remotes = Counting()
    keys = [LongTermKeys.generate() for _ in range(60)]
    for n, k in enumerate(keys):
        keep.admit(f"e{n}", "r", 0, k.verkey, k.pubkey, Acceptance.NEVER if n % 2 else Acceptance.ALWAYS, float(n))
    assert len(keep.remotes()) == 50  # strays (pending, from joins) evicted to make room, oldest first
    assert keep.get(keys[1].fingerprint) is None and keep.get(keys[59].fingerprint) is not None
    assert keep.get(keys[0].fingerprint) is not None  # an accepted record is never evicted
    keep.accepted_by_pubkey(keys[58].pubkey)
    Counting.walks -= 1  # remotes() above
    assert Counting.walks == 0
