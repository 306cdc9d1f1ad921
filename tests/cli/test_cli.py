"""The flowcast command as a user runs it: traces, errors, clean stops."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def flowcast(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flowcast.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_run_virtual_trace_of_hello():
    result = flowcast("run", "flows/hello.flo", "--virtual", "--trace", "--until", "5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "0 main - -> counting"
    assert "0.625 main counting -> greet" in lines
    assert "counted to five: hello.count = 5" in lines
    assert lines[-2:] == ["1.625 main greet -> finish", "goodbye"]


def test_check_reports_ok_and_errors_with_location(tmp_path):
    ok = flowcast("check", "flows/traffic.flo")
    assert ok.returncode == 0 and "ok" in ok.stdout
    bad = tmp_path / "bad.flo"
    bad.write_text("house h\nframer f be active\n  frame start\n    go strat\n")
    result = flowcast("check", str(bad))
    assert result.returncode == 1
    assert f"{bad}:4:" in result.stderr and "did you mean 'start'?" in result.stderr and "^" in result.stderr


def test_unknown_behaviour_stops_before_anything_runs(tmp_path):
    flow = tmp_path / "typo.flo"
    flow.write_text("house h\nframer f be active\n  frame a\n    print started\n    do cuont to .x\n")
    result = flowcast("run", str(flow), "--virtual", "--until", "1")
    assert result.returncode == 1
    assert "started" not in result.stdout
    assert "unknown behaviour 'cuont'" in result.stderr and "did you mean 'count'?" in result.stderr


def test_failing_behaviour_names_itself_and_the_line(tmp_path):
    (tmp_path / "boom.py").write_text(
        "from flowcast.behaving import behaviour\n\n@behaviour('boom')\ndef boom(io):\n    raise ValueError('kaput')\n"
    )
    flow = tmp_path / "boom.flo"
    flow.write_text("house h\nload boom.py\nframer f be active\n  frame a\n    do boom\n")
    result = flowcast("run", str(flow), "--virtual", "--until", "1")
    assert result.returncode == 1
    assert "boom.flo:5" in result.stderr and "kaput" in result.stderr


def test_sigterm_stops_cleanly_and_runs_exit_contexts(tmp_path):
    flow = tmp_path / "forever.flo"
    flow.write_text(
        "house h\nframer f be active\n  frame waiting\n    print entered\n    exit\n    print cleaned up\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowcast.cli.main", "run", str(flow)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)  # bounded: a stuck child fails, not hangs
        assert ready, "the flow printed nothing within 30 s"
        first = proc.stdout.readline()
        assert first.strip() == "entered"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "cleaned up"
    assert "stopped by SIGTERM" in err


def test_unknown_command_suggests():
    result = flowcast("rn")
    assert result.returncode == 2 and "did you mean 'run'?" in result.stderr


def test_run_exports_logged_shares_as_parquet(tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "events"
    result = flowcast("run", "flows/traffic.flo", "--virtual", "--until", "12", "--export", str(out), "--estate", "here")
    assert result.returncode == 0, result.stderr
    assert "exported 1 segment(s)" in result.stderr
    files = list(out.rglob("*.parquet"))
    assert len(files) == 1 and not list(out.rglob(".*.inprogress"))
    rows = pq.read_table(files[0]).to_pylist()
    assert [(r["stamp"], r["share"], r["fields"]) for r in rows][:4] == [
        (0.0, "light.color", '{"value":"red"}'),
        (3.0, "light.color", '{"value":"green"}'),
        (4.625, "light.color", '{"value":"yellow"}'),
        (5.625, "light.color", '{"value":"red"}'),
    ]
    assert {r["estate"] for r in rows} == {"here"} and {r["house"] for r in rows} == {"crossing"}


def test_bad_house_or_export_target_is_a_one_line_error(tmp_path):
    result = flowcast("run", "flows/hello.flo", "--virtual", "--house", "nosuch")
    assert result.returncode == 2 and "no house 'nosuch'; houses: hello" in result.stderr
    assert "Traceback" not in result.stderr
    result = flowcast("run", "flows/hello.flo", "--virtual", "--export", str(tmp_path / "x"), "--estate", "../evil")
    assert result.returncode == 2 and "cannot export" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path.parent / "evil").exists()


def test_convert_writes_an_ordinary_file(tmp_path):
    out = tmp_path / "hello.yaml"
    result = flowcast("convert", "flows/traffic.flo", str(out))
    assert result.returncode == 0, result.stderr
    assert out.stat().st_mode & 0o044 == 0o044  # readable by group and others under the usual umask


def test_run_exports_the_routers_share_to_share_messages(tmp_path):
    import pyarrow.parquet as pq

    flow = tmp_path / "routed.flo"
    flow.write_text(
        "house here\ninit .ball with value 0\nframer main be active first up\n  frame up\n"
        '    do router setup with estate "here" yard "main" at enter\n    do queue to inbox at enter\n    go play\n'
        '  frame play\n    inc .ball with 1\n    do route send from .ball with dst "inbox" tag "ball" at enter\n    go rest\n'
        "  frame rest\n    go play if .ball < 3\n"
    )
    out = tmp_path / "events"
    result = flowcast("run", str(flow), "--virtual", "--until", "2", "--export", str(out), "--estate", "here")
    assert result.returncode == 0, result.stderr
    rows = [r for f in out.rglob("*.parquet") for r in pq.read_table(f).to_pylist() if r["kind"] != "share"]
    assert [(r["kind"], r["src"], r["dst"], r["detail"]) for r in rows] == [
        (kind, "ball/main/here/main", "inbox/main/here/main", "ball") for _ in range(3) for kind in ("routed", "landed")
    ]
    assert [r["msg_id"] for r in rows[::2]] == [r["msg_id"] for r in rows[1::2]]


def test_version_is_the_distribution_version(capsys):
    """``flowcast --version`` answers from the installed metadata, which pip and bug reports agree on."""
    from importlib.metadata import version

    from flowcast.cli.main import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"flowcast {version('flowcast')}"
