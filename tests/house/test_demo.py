"""README's demo command: ping-pong between two estates, end to end, as processes."""

from __future__ import annotations

import subprocess
import sys

from tests.house.estates import ROOT


def test_demo_plays_five_volleys_and_stops_cleanly():
    done = subprocess.run(
        [sys.executable, "-m", "flowcast.cli.main", "demo", "--timeout", "30"],
        cwd=ROOT, capture_output=True, text=True, timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert [f"pong: ball.in value={n}" in out for n in range(1, 6)] == [True] * 5
    assert "ping-pong over: five volleys returned" in out
    assert "beta  alive" in out  # flowcast status, as seen from alpha
    assert "5  ball.out@manor.alpha/main -> ball.in@.beta/main" in out


def test_installed_demo_runs_in_a_temporary_copy_of_the_packaged_examples(tmp_path, monkeypatch, capsys):
    """Without a checkout the examples come from the package, copied: a demo writes its run/ and keeps/ beside them."""
    from flowcast.house import demo

    packaged = tmp_path / "site" / "examples"
    (packaged / "houses").mkdir(parents=True)
    (packaged / "flows").mkdir()
    (packaged / "houses" / "pingpong-alpha.yaml").write_text("estate: alpha\n")
    (packaged / "flows" / "ping.flo").write_text("house ping\n")
    monkeypatch.setattr(demo, "PACKAGED_EXAMPLES", packaged)
    monkeypatch.setattr(demo, "example_root", lambda *needed: None)  # as if installed, run from elsewhere
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    root = demo.demo_root("flowcast demo", "houses/pingpong-alpha.yaml", "flows/ping.flo")
    assert root is not None and root.parent == tmp_path / "tmp" and root.name.startswith("flowcast-demo-")
    assert (root / "houses" / "pingpong-alpha.yaml").read_text() == "estate: alpha\n"
    assert (root / "flows" / "ping.flo").is_file()
    assert f"running in {root}" in capsys.readouterr().out
    assert demo.demo_root("flowcast demo", "houses/missing.yaml") is None
    assert "the examples are missing (houses/missing.yaml)" in capsys.readouterr().err
