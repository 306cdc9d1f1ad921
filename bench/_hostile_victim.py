"""The victim of bench/hostile.py: a real ``flowcast run`` estate, its layout, its memory.

The issue's measurement is against an estate as a user runs it, so the
victim is the ``flowcast`` command on a generated layout (one house, the
manor, which owns the road and the CAST cache), not the stacks wired by
hand.  Its budgets are written into that layout, and the same numbers are
what its memory growth is judged against (:meth:`Victim.budget`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BEHAVE = Path(__file__).resolve().parent / "_hostile_behave.py"

#: Interpreter churn a house shows under any load (allocator arenas, the GC's lag): added to every budget.
ALLOWANCE = 16 << 20
#: Bytes the router keeps per ``SHARE.error`` queue (at most 1,000 reports of at most 16 KiB: docs/routing.md).
ERROR_QUEUE_BYTES = 1000 * (16 << 10)
#: The causal buffer's goal per message (issue 25: at most 400 B per buffered message).
CAUSAL_PER_MESSAGE = 400


@dataclass
class Settings:
    """The victim's configured budgets, as its layout states them (bytes unless named otherwise)."""

    hold_budget: int = 16 << 20
    max_message: int = 16 << 20
    backlog_bytes: int = 4 << 20
    window_bytes: int = 1 << 20
    cache_bytes: int = 256 << 20
    max_subs: int = 64
    max_buffered: int = 10_000
    max_per_publisher: int = 1_000

    #: Further layout settings, ``(("roads", "main", "KEY"), value)``: what ``--set`` adds (a budget a fix
    #: introduces, say), written over the generated layout.
    extra: list[tuple[tuple[str, ...], Any]] = field(default_factory=list)

    def road(self) -> dict[str, Any]:
        return {"hold_budget": self.hold_budget, "max_message": self.max_message, "backlog_bytes": self.backlog_bytes}

    def set(self, assignment: str) -> None:
        """``PATH=VALUE`` (``roads.main.hold_budget=8388608``, ``cast.window_bytes=65536``): VALUE is JSON or
        else text.  A key this class knows also moves the budget the growth is judged against."""
        path, sep, text = assignment.partition("=")
        keys = tuple(part for part in path.split(".") if part)
        if not sep or not keys:
            raise ValueError(f"--set takes PATH=VALUE, not {assignment!r}")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if keys[-1] in {f.name for f in dataclasses.fields(self)} - {"extra"}:
            setattr(self, keys[-1], value)
        self.extra.append((keys, value))


@dataclass
class Shape:
    """What one attack class needs the victim to hold and do (see bench/_hostile_behave.py)."""

    big: int = 0  # bytes of the share ``big`` (share read floods)
    cached: int = 0  # messages in the CAST cache at start
    cached_size: int = 1024
    stream_rate: float = 0.0  # messages a second the victim publishes while it runs
    feed_rate: float = 0.0  # messages a second the victim's flow sends the attacker
    feed_size: int = 1024
    cast: bool = False
    causal_owner: str = ""  # hex verify keys: a causal section with one topic
    causal_publishers: tuple[str, ...] = ()
    attackers: tuple[str, ...] = ("mallory",)
    extra_policy: list[dict[str, Any]] = field(default_factory=list)


def _yaml(value: Any) -> str:
    """JSON is YAML: the layout is written as JSON so no value needs quoting rules."""
    return json.dumps(value, indent=1)


def write_layout(top: Path, shape: Shape, settings: Settings) -> Path:
    """The victim's flow and layout under ``top``; the layout's path."""
    acts = [f"    do hostile setup with big {shape.big} cached {shape.cached} size {shape.cached_size}"]
    if shape.stream_rate:
        acts.append(f"    do hostile stream with rate {shape.stream_rate} size 256")
    if shape.feed_rate:
        acts.append(f'    do hostile feed with dst "sink@.{shape.attackers[0]}" rate {shape.feed_rate} size {shape.feed_size}')
    flow = top / "victim.flo"
    flow.write_text("house victim\n\nload " + str(BEHAVE) + "\n\nframer main be active first run\n  frame run\n" + "\n".join(acts) + "\n")
    policy: list[dict[str, Any]] = [{"allow": "read", "estate": "honest", "share": "probe"}]
    policy += shape.extra_policy
    layout: dict[str, Any] = {
        "estate": "victim",
        "keep": str(top / "keep"),
        "run": str(top / "run"),
        "period": 0.02,
        "drain": 1,
        "roads": {"main": {"port": 0, "acceptance": "always", **settings.road()}},
        "policy": policy,
        "houses": [{"name": "manor", "flow": str(flow), "manor": True}],
    }
    if shape.cast or shape.causal_owner:
        grants = [{"estate": name, "patterns": ["victim/**"]} for name in (*shape.attackers, "honest")]
        layout["cast"] = {"max_bytes": settings.cache_bytes, "window_bytes": settings.window_bytes,
                          "max_subs": settings.max_subs, "subscribers": grants}
    if shape.causal_owner:
        layout["causal"] = {
            "keys": str(top / "causal-keys"),
            "topics": {"chat": {"owner": shape.causal_owner, "publishers": list(shape.causal_publishers)}},
            "max_buffered": settings.max_buffered,
            "max_per_publisher": settings.max_per_publisher,
            "heads_every": None,
        }
    for keys, value in settings.extra:
        if len(keys) > 1 and keys[0] in ("cast", "causal") and keys[0] not in layout:
            continue  # a class whose victim has no such section keeps having none
        place = layout
        for key in keys[:-1]:
            place = place.setdefault(key, {})
        place[keys[-1]] = value
    path = top / "victim.yaml"
    path.write_text(_yaml(layout) + "\n")
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def memory(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (the peak) of ``pid`` in bytes, from /proc (empty when it is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


class Victim:
    """One ``flowcast run`` of the generated layout, its manor's pid and road address."""

    def __init__(self, top: Path, shape: Shape, settings: Settings, start_timeout: float = 60.0) -> None:
        self.top = top
        self.run = top / "run"
        self.settings = settings
        self.layout = write_layout(top, shape, settings)
        self.log = open(top / "victim.out", "wb")
        argv = [sys.executable, "-m", "flowcast.cli.main", "run", str(self.layout), "--houses", "1"]
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)
        self.pid, self.address = self._wait_started(start_timeout)

    def _wait_started(self, timeout: float) -> tuple[int, tuple[str, int]]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"the victim estate exited {self.process.returncode}: {self.output()[-1500:]}")
            status = _read_json(self.run / "status" / "manor.json")
            port = status.get("ports", {}).get("main")
            pid = status.get("pid")
            if port and pid:
                return int(pid), (str(port[0]), int(port[1]))
            time.sleep(0.05)
        raise RuntimeError(f"the victim estate did not start within {timeout:.0f} s: {self.output()[-1500:]}")

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        try:
            return (self.top / "victim.out").read_text(errors="replace")
        except OSError:
            return ""

    def memory(self) -> dict[str, int]:
        return memory(self.pid)

    def alive(self) -> bool:
        return self.process.poll() is None and bool(memory(self.pid))

    def status(self) -> dict[str, Any]:
        """The manor's status file (router counts, roads; written every couple of seconds)."""
        return _read_json(self.run / "status" / "manor.json")

    def stored(self, wires: list[bytes]) -> int | None:
        """How many of ``wires`` the victim's CAST cache holds (its relay stored them); None without a cache.

        Read after the victim stopped, from its own file (read-only), so
        the figure is what was committed, not what a status line says.
        """
        import sqlite3

        path = self.run / "cast" / "cache.sqlite3"
        if not path.exists() or not wires:
            return None
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            marks = ",".join("?" * len(wires))
            return int(db.execute(f"SELECT count(*) FROM messages WHERE data IN ({marks})", wires).fetchone()[0])

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL of the group after ``timeout``; the exit status."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(10)
        self.log.close()
        return self.process.returncode
