"""Keep._reindex: a change to a field the keep's indexes are keyed on keeps them true."""

from __future__ import annotations

import pytest

from flowcast.transport.crypto import LongTermKeys
from flowcast.transport.keep import Acceptance, Keep, Status


def _keep_with(tmp_path, *names):
    keep = Keep(tmp_path / "k")
    keep.create_local("alpha", "main", 1)
    records = []
    for name in names:
        keys = LongTermKeys.generate()
        records.append(keep.admit(name, "worker", 0, keys.verkey, keys.pubkey, Acceptance.ALWAYS).record)
    return keep, records


def test_a_rename_moves_the_binding(tmp_path):
    keep, (beta,) = _keep_with(tmp_path, "beta")
    keep._reindex(beta, name="gamma")
    assert beta.name == "gamma"
    assert keep.bound("gamma") is beta and keep.bound("beta") is None


def test_a_status_change_leaves_and_enters_the_right_indexes(tmp_path):
    keep, (beta,) = _keep_with(tmp_path, "beta")
    keep._reindex(beta, status=Status.PENDING)
    assert keep.bound("beta") is None and beta.fingerprint in keep._pending
    keep._reindex(beta, status=Status.ACCEPTED)
    assert keep.bound("beta") is beta and beta.fingerprint not in keep._pending


def test_rejecting_with_a_note_unbinds_the_name(tmp_path):
    keep, (beta,) = _keep_with(tmp_path, "beta")
    keep._reindex(beta, status=Status.REJECTED, note="rejected by hand")
    assert (beta.status, beta.note) == (Status.REJECTED, "rejected by hand")
    assert keep.bound("beta") is None and beta.pubkey not in keep._by_pubkey


def test_an_unknown_field_is_refused_and_nothing_changes(tmp_path):
    keep, (beta,) = _keep_with(tmp_path, "beta")
    with pytest.raises(TypeError, match="no field nmae"):
        keep._reindex(beta, nmae="gamma")
    assert not hasattr(beta, "nmae") and keep.bound("beta") is beta
