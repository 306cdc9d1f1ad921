"""How long an estate takes to stop, with and without traffic in flight (drain on stop).

Real ``flowcast run`` estates on loopback, each run in a fresh directory;
the figure is the wall time from SIGTERM to the supervisor's exit (every
house drained, closed and reaped), median of ``--repeats`` stops, with
the spread (min, max) beside it.  Figures (one line each; ``--json`` one
object):

* ``stop_idle_s``  two idle houses, ``drain: 3``: nothing in flight, so
  the drain must not be waited out.
* ``stop_lane_traffic_s``  a worker pours a numbered stream to its manor
  (100 messages per 10 ms tick), whose flow takes them every 0.5 s.
* ``stop_road_traffic_s``  the worker pours to another estate through the
  manor's road; only alpha is stopped.
* ``stop_dead_peer_s``  as the road case with the receiving estate frozen
  (SIGSTOP), ``drain: 1``: the stop costs the drain and reports.

Each line's note gives the houses' own drain times (from the ``stop``
section of their status files) and what they reported undelivered.

Run: ``.venv/bin/python bench/stop.py [--json] [--repeats N] [--quick]``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Figures, parser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLAY = ROOT / "tests" / "house" / "routeplay.py"  # the numbered-stream behaviours the stop tests use
BOUND = 60.0  # seconds any one wait may take


def _port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _flow(path: Path, house: str, body: str) -> None:
    path.write_text(f"house {house}\n\nload {PLAY}\n\n{body}\n")


def _start(layout: Path, houses: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "flowcast.cli.main", "run", str(layout), "--houses", str(houses)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)


def _wait(what: str, check: Callable[[], Any]) -> Any:
    end = time.monotonic() + BOUND
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _status(run: Path, yard: str) -> dict[str, Any]:
    try:
        return json.loads((run / "status" / f"{yard}.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _lines(path: Path) -> int:
    try:
        return path.read_text().count("\n")
    except FileNotFoundError:
        return 0


def _stop(process: subprocess.Popen) -> float:
    """SIGTERM to exit, in seconds: a blocking wait (``Popen.wait(timeout)`` polls in steps of up to
    50 ms, too coarse here), bounded by a timer that kills the estate's process group."""
    killer = threading.Timer(BOUND, lambda: os.killpg(process.pid, signal.SIGKILL))
    killer.start()
    try:
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait()
        took = time.monotonic() - began
    finally:
        killer.cancel()
    if code == -signal.SIGKILL:
        raise RuntimeError("the estate did not stop")
    return took


def _supervised(run: Path, name: str) -> int | None:
    try:
        houses = json.loads((run / "supervisor.json").read_text())["houses"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return None
    return next((h.get("pid") for h in houses if h["name"] == name and h.get("state") in ("starting", "running")), None)


def one_stop(kind: str, where: Path) -> dict[str, Any]:
    """Start the estate(s) of ``kind`` in ``where``, stop alpha mid-stream, return the figures of that stop."""
    flows = where / "flows"
    flows.mkdir()
    _flow(flows / "idle.flo", "idle", "framer idle be active first rest\n  frame rest\n    print resting\n")
    sent, errors, got = where / "sent.jsonl", where / "errors.jsonl", where / "got.jsonl"
    a_port, b_port = _port(), _port()
    dst = "outbox@manor" if kind == "lane" else "inbox@manor.beta"
    _flow(flows / "app.flo", "app", "framer pour be active first go\n  frame go\n"
          f"    do routeplay pour with dst \"{dst}\" per_tick 100 sent \"{sent}\" errors \"{errors}\"\n")
    _flow(flows / "keeper.flo", "keeper",
          f"framer keep be active at 0.5 first take\n  frame take\n    do routeplay take from outbox with out \"{got}\"\n")
    _flow(flows / "sink.flo", "sink",
          f"framer keep be active first listen\n  frame listen\n    do routeplay record from inbox with out \"{got}\"\n")
    drain = {"idle": 3, "lane": 3, "road": 3, "dead": 1}[kind]
    manor_flow = {"idle": "idle", "lane": "keeper"}.get(kind, "idle")
    worker_flow = "idle" if kind == "idle" else "app"
    road = "" if kind in ("idle", "lane") else (
        f"roads:\n  main:\n    port: {a_port}\n    acceptance: always\n"
        f"    remotes: [{{estate: beta, host: 127.0.0.1, port: {b_port}}}]\n")
    (where / "alpha.yaml").write_text(f"""estate: alpha
period: 0.01
drain: {drain}
{road}houses:
  - {{name: manor, flow: flows/{manor_flow}.flo, manor: true}}
  - {{name: app, flow: flows/{worker_flow}.flo}}
""")
    (where / "beta.yaml").write_text(f"""estate: beta
roads:
  main: {{port: {b_port}, acceptance: always}}
policy:
  - {{allow: write, estate: alpha, share: inbox}}
houses:
  - {{name: manor, flow: flows/sink.flo, manor: true}}
""")
    run, b_run = where / "run" / "alpha", where / "run" / "beta"
    beta = _start(where / "beta.yaml", 1) if kind in ("road", "dead") else None
    alpha = _start(where / "alpha.yaml", 2)
    frozen = None
    try:
        _wait("alpha's houses", lambda: _status(run, "manor").get("pid") and _status(run, "app").get("pid"))
        if kind != "idle":
            _wait("the stream to flow", lambda: _lines(got) >= (1 if kind == "lane" else 2000))
            if kind == "dead":
                frozen = _wait("beta's manor", lambda: _supervised(b_run, "manor"))
                os.kill(frozen, signal.SIGSTOP)
            before = _lines(sent)
            _wait("alpha to pour on", lambda: _lines(sent) >= before + 20)  # 20 ticks: the stop lands at a random phase
        took = _stop(alpha)
    finally:
        if frozen is not None:
            os.kill(frozen, signal.SIGCONT)
        for process in (alpha, beta):
            if process is not None and process.poll() is None:
                _stop(process)
    stops = {yard: _status(run, yard).get("stop") or {} for yard in ("app", "manor")}
    return {
        "took": took,
        "drains": {yard: s.get("took") for yard, s in stops.items()},
        "undelivered": sum(s.get("undelivered", 0) + sum(s.get("unconsumed", {}).values()) for s in stops.values()),
    }


NAMES = {"idle": "stop_idle_s", "lane": "stop_lane_traffic_s", "road": "stop_road_traffic_s", "dead": "stop_dead_peer_s"}


def add_figures(figures: Figures, kinds: tuple[str, ...], repeats: int) -> None:
    """Median of ``repeats`` stops of each kind, with the spread: bench/cast.py prints the same lines."""
    for kind in kinds:
        runs = []
        for _ in range(repeats):
            where = Path(tempfile.mkdtemp(prefix=f"flowcast-stop-{kind}-"))
            try:
                runs.append(one_stop(kind, where))
            finally:
                shutil.rmtree(where, ignore_errors=True)
        times = [r["took"] for r in runs]
        drains = [max((d for d in r["drains"].values() if d is not None), default=0.0) for r in runs]
        figures.add(NAMES[kind], statistics.median(times), "s",
                    note=f"min {min(times):.3f}, max {max(times):.3f}; longest house drain median {statistics.median(drains):.3f} s;"
                         f" reported undelivered {[r['undelivered'] for r in runs]}",
                    extra={"runs": times, "house_drains": [r["drains"] for r in runs],
                           "undelivered": [r["undelivered"] for r in runs]})


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()
    repeats = 1 if args.quick else max(1, args.repeats)
    figures = Figures("stop", repeats=repeats)
    add_figures(figures, ("idle",) if args.quick else ("idle", "lane", "road", "dead"), repeats)
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
