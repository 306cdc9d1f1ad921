"""Keep files, permissions, policies, and the ``flowcast keys`` command."""

from __future__ import annotations

import os
import stat

import pytest

from flowcast.transport.crypto import LongTermKeys, ReplayWindow, fingerprint, open_sealed, seal
from flowcast.transport.keep import Acceptance, Keep, KeepError, Status, validate_name
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
    assert keep.admit("x", "r", 0, second.verkey, second.pubkey, Acceptance.ALWAYS).status is Status.ACCEPTED
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
