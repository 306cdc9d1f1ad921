"""``flowcast run LAYOUT --export DIR`` and a layout's ``export:``: every house of an estate records.

Two estates on loopback, ping-pong style: alpha (manor, worker) is started
with ``--export DIR`` (overriding its layout's ``export:``), beta (manor)
by its layout's ``export:`` naming the same DIR.  After the volleys both
stop with SIGTERM; ``flowcast export DIR --out OUT`` then collects, with no
code, each house's logged shares, routed messages and lane/road events.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.house.estates import ROOT, free_udp_port, stop_estate, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="estates run on Linux")

PING = """house ping

init .ball.out with value 0
init .ball.back with value 0
init .ticks.in with value 0

log .ball.back .ticks.in

framer pinger be active first ready
  frame ready
    go serve if .flowcast.road.main.presence is updated

  frame serve
    inc .ball.out with 1
    do route send from .ball.out with dst "ball.in@.beta" tag "ping" at enter
    go wait

  frame wait
    go over if .ball.back >= 5
    go serve if .ball.back is updated

  frame over
    print ping-pong over: five volleys returned
"""

PONG = """house pong

init .ball.in with value 0
init .ball.out with value 0

log .ball.in

framer ponger be active first listen
  frame listen
    go hit if .ball.in is updated

  frame hit
    copy .ball.in into .ball.out
    do route send from .ball.out with dst "ball.back@.alpha" tag "pong" at enter
    go listen
"""

WORKER = """house worker

init .tick with value 0

log .tick

framer ticker be active first wait
  frame wait
    go send if elapsed >= 0.25

  frame send
    inc .tick with 1
    do route send from .tick with dst "ticks.in@manor" tag "tick" at enter
    go wait
"""


def _layouts(tmp_path: Path, events: Path) -> tuple[Path, Path]:
    a_port, b_port = free_udp_port(), free_udp_port()
    while b_port == a_port:
        b_port = free_udp_port()
    (tmp_path / "ping.flo").write_text(PING)
    (tmp_path / "pong.flo").write_text(PONG)
    (tmp_path / "worker.flo").write_text(WORKER)
    alpha = tmp_path / "alpha.yaml"
    alpha.write_text(f"""estate: alpha
keep: keeps/alpha
run: run/alpha
export: ignored            # --export on the command line wins
roads:
  main: {{port: {a_port}, acceptance: always}}
policy:
  - {{allow: write, estate: beta, share: "ball.back"}}
houses:
  - {{name: manor, flow: ping.flo, manor: true}}
  - {{name: worker, flow: worker.flo}}
""")
    beta = tmp_path / "beta.yaml"
    beta.write_text(f"""estate: beta
keep: keeps/beta
run: run/beta
export: {{dir: {events.name}}}
roads:
  main:
    port: {b_port}
    acceptance: always
    remotes: [{{estate: alpha, host: 127.0.0.1, port: {a_port}}}]
policy:
  - {{allow: write, estate: alpha, share: "ball.in"}}
houses:
  - {{name: manor, flow: pong.flo, manor: true}}
""")
    return alpha, beta


def _start(layout: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "flowcast.cli.main", "run", str(layout), "--houses", "2", *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)


def _log(tmp_path: Path, estate: str, yard: str) -> str:
    try:
        return (tmp_path / "run" / estate / "logs" / f"{yard}.log").read_text(errors="replace")
    except FileNotFoundError:
        return ""


def run_and_collect(tmp_path: Path) -> Path:
    """Run both estates until the volleys are over, stop them, check their logs; ``flowcast export --out``'s directory."""
    from flowcast.cli.main import main

    events = tmp_path / "events"
    alpha_layout, beta_layout = _layouts(tmp_path, events)
    alpha = _start(alpha_layout, "--export", str(events))
    beta = _start(beta_layout)
    try:
        def over() -> bool:
            for name, proc in (("alpha", alpha), ("beta", beta)):
                if proc.poll() is not None:
                    raise AssertionError(f"estate {name} exited with {proc.returncode}: {proc.stdout.read().decode(errors='replace')}")
            return "ping-pong over" in _log(tmp_path, "alpha", "manor")

        wait_for(over, timeout=30.0, what="five volleys")
    finally:
        a_code, a_out = stop_estate(alpha)
        b_code, b_out = stop_estate(beta)
    assert (a_code, b_code) == (0, 0), a_out + b_out
    assert f"events recorded under {events}" in a_out
    for estate, yards in (("alpha", ("manor", "worker")), ("beta", ("manor",))):
        for yard in yards:
            log = _log(tmp_path, estate, yard)
            assert "Traceback" not in log, log
            assert f"house {yard} exported" in log, log
    assert not (tmp_path / "ignored").exists()  # the command line overrode alpha's 'export:'
    assert not any((events / ".journal").rglob("*.arrows")), "an open segment was left behind"

    out = tmp_path / "collected"
    assert main(["export", str(events), "--out", str(out)]) == 0
    return out


def test_two_estates_export_their_houses_events(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = run_and_collect(tmp_path)
    files = sorted(out.rglob("*.parquet"))
    assert files
    table = pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()

    def rows(estate: str, house: str, kind: str) -> list[dict]:
        return [r for r in table if (r["estate"], r["house"], r["kind"]) == (estate, house, kind)]

    # logged shares, each house its own
    assert {r["share"] for r in rows("alpha", "manor", "share")} >= {"ball.back", "ticks.in"}
    assert {r["share"] for r in rows("beta", "manor", "share")} == {"ball.in"}
    assert {r["share"] for r in rows("alpha", "worker", "share")} == {"tick"}
    # routed messages, share to share, at both ends
    assert any(r["dst"].startswith("ball.in/") and r["dst"].endswith("/beta/main") for r in rows("alpha", "manor", "routed"))
    assert any(r["share"] == "ball.in" for r in rows("beta", "manor", "landed"))
    assert any(r["share"] == "ball.out" and r["dst"].startswith("ball.back/") for r in rows("beta", "manor", "routed"))
    assert any(r["share"] == "ball.back" for r in rows("alpha", "manor", "landed"))
    assert any(r["share"] == "tick" for r in rows("alpha", "worker", "routed"))
    assert any(r["share"] == "ticks.in" for r in rows("alpha", "manor", "landed"))
    # the stacks' own events: the roads between the manors, the lane from the worker
    assert rows("alpha", "manor", "sent") and rows("beta", "manor", "sent")
    assert rows("alpha", "worker", "sent")
    assert {r["house"] for r in table} == {"manor", "worker"}
