"""Atomic, durable file writes shared by keeps, converted flows and exports."""

import os
import stat

import pytest

from flowcast.runtime.durable import atomic_write, replace_durably


def test_atomic_write_replaces_whole_with_the_asked_mode(tmp_path):
    target = tmp_path / "keep.json"
    atomic_write(target, b"old", mode=0o600)
    atomic_write(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    plain = tmp_path / "flow.yaml"
    old = os.umask(0o022)
    try:
        atomic_write(plain, b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(plain.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flow.yaml", "keep.json"]  # no temporaries left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "f"
    atomic_write(target, b"old")
    with pytest.raises(TypeError):
        atomic_write(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_replace_durably_moves_into_place(tmp_path):
    tmp = tmp_path / ".x.inprogress"
    tmp.write_bytes(b"data")
    replace_durably(tmp, tmp_path / "x")
    assert (tmp_path / "x").read_bytes() == b"data" and not tmp.exists()
