"""Small helpers every ``bench/*.py`` script shares.

Benchmarks are read by people (one line per figure) and by scripts (the
closing note of an issue, CI comparisons), so every script prints figures
the same way: ``name: value unit (ratio ...)`` on the console, or a single
JSON object with ``--json``.  Keeping that format in one place means a
parser written for one script works for all of them.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import shutil
import tempfile
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ChildHouse", "Figure", "Figures", "best_of", "machine", "next_command", "parser", "timed"]


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every bench script understands.

    ``--quick`` exists so a smoke test can check that a script still runs
    (and prints well-formed figures) in a fraction of a second; the figures
    it gives are not meant to be quoted.
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", action="store_true", help="print one JSON object of all figures")
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the script runs, figures meaningless")
    p.add_argument("--repeats", type=int, default=3, help="take the best of this many runs (default 3)")
    return p


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` takes, with the cyclic GC off.

    A collection landing inside one measurement and not another is noise
    rather than a property of the thing measured (``timeit`` does the same).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()


def best_of(repeats: int, run: Callable[[], float]) -> float:
    """Smallest of ``repeats`` results of ``run()`` (a duration in seconds).

    The minimum is the run the machine disturbed least; means mix in other
    processes' work.
    """
    return min(run() for _ in range(max(1, repeats)))


def cpu_per_message(run: Callable[[], int], count: int, repeats: int) -> float:
    """Smallest CPU seconds per message over ``repeats`` calls of ``run`` (which returns how many
    messages it handled, checked against ``count``), with GC off as the stacks' benches run."""
    best = float("inf")
    for _ in range(repeats):
        gc.disable()
        try:
            start = time.process_time()
            got = run()
            spent = time.process_time() - start
        finally:
            gc.enable()
        if got != count:
            raise RuntimeError(f"{got} messages of {count}")
        best = min(best, spent)
    return best / count


@contextmanager
def scratch_dirs(prefix: str) -> Iterator[Callable[[], Path]]:
    """A function making a new empty directory per call (a recorder's root per run), all removed at the end."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    counter = iter(range(10**9))

    def fresh() -> Path:
        path = scratch / str(next(counter))
        path.mkdir()
        return path

    try:
        yield fresh
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class BenchHouse:
    """What flowcast's wiring functions need of a house (store, scheduler, the router and cast
    slots, on_close), for benches that run a house's parts in a child process without a House."""

    def __init__(self, store: Any, scheduler: Any) -> None:
        self.store = store
        self.scheduler = scheduler
        self.router = None
        self.cast = None
        self.closers: list = []

    def on_close(self, fn: Any) -> None:
        self.closers.append(fn)

    def close(self) -> None:
        """Run the closers, newest first; one that raises does not stop the others (nor hide the bench's result)."""
        for close in reversed(self.closers):
            try:
                close()
            except Exception:  # noqa: BLE001 - closing must not hide the result
                pass


def next_command(conn: Any, scheduler: Any) -> tuple[Any, ...] | None:
    """The parent's next command for a child house, or None (and the house stopped) when the parent is gone."""
    try:
        return tuple(conn.recv())
    except EOFError:
        scheduler.stop()
        return None


class ChildHouse:
    """A bench house in a child process, driven over a pipe: ``ask`` sends a command and waits for the
    answer of the kind named; the child's ``("error", text, traceback)`` (see ``run_reported``) raises here,
    so a bench fails with the child's reason instead of waiting out its timeout."""

    def __init__(self, ctx: Any, main: Callable[[Any, dict[str, Any]], None], spec: dict[str, Any], name: str,
                 timeout: float = 30.0) -> None:
        self.name = name
        self.timeout = timeout
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=main, args=(child, spec), daemon=True)
        self.proc.start()
        child.close()

    def send(self, *message: Any) -> None:
        self.conn.send(message)

    def expect(self, kind: str, timeout: float) -> Any:
        if not self.conn.poll(timeout):
            raise RuntimeError(f"{self.name} gave no {kind!r} within {timeout:.0f} s")
        message = self.conn.recv()
        if message[0] == "error":
            raise RuntimeError(f"{message[1]}\n{message[2]}")
        if message[0] != kind:
            raise RuntimeError(f"{self.name}: expected {kind!r}, got {message[0]!r}")
        return message[1] if len(message) > 1 else None

    def ask(self, kind: str, *message: Any, timeout: float | None = None) -> Any:
        self.send(*message)
        return self.expect(kind, self.timeout if timeout is None else timeout)

    def close(self) -> None:
        try:
            self.send("stop")
        except OSError:
            pass
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)
        self.conn.close()


def run_reported(body: Callable[[Any, dict[str, Any]], None], conn: Any, spec: dict[str, Any], label: str) -> None:
    """A child house's main: ``body(conn, spec)`` with GC off, anything it raises sent to the parent
    as ``("error", text, traceback)`` (the parent fails the bench with it instead of waiting)."""
    gc.disable()
    try:
        body(conn, spec)
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        try:
            conn.send(("error", f"{label}: {type(error).__name__}: {error}", traceback.format_exc(limit=8)))
        except OSError:
            pass


def machine() -> dict[str, Any]:
    """What the figures were measured on; absolute numbers mean little without it."""
    import os

    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


@dataclass
class Figure:
    """One measured value; ``value`` None means it could not be measured (see ``note``)."""

    name: str
    value: float | None
    unit: str
    ratios: dict[str, float] = field(default_factory=dict)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self, digits: int = 4) -> str:
        if self.value is None:
            head = f"{self.name}: n/a {self.unit}"
        else:
            head = f"{self.name}: {self.value:.{digits}g} {self.unit}"
        notes = [f"{k} {v:.3g}" for k, v in self.ratios.items()]
        if self.note:
            notes.append(self.note)
        return f"{head} ({', '.join(notes)})" if notes else head


class Figures:
    """The figures of one script run, printed as lines or as one JSON object."""

    def __init__(self, script: str, **settings: Any) -> None:
        self.script = script
        self.settings = settings
        self.items: list[Figure] = []

    def add(self, name: str, value: float | None, unit: str, **kwargs: Any) -> Figure:
        figure = Figure(name, value, unit, **kwargs)
        self.items.append(figure)
        return figure

    def as_dict(self) -> dict[str, Any]:
        return {
            "script": self.script,
            "machine": machine(),
            "settings": self.settings,
            "figures": {
                f.name: {
                    "value": f.value,
                    "unit": f.unit,
                    **({"ratios": f.ratios} if f.ratios else {}),
                    **({"note": f.note} if f.note else {}),
                    **f.extra,
                }
                for f in self.items
            },
        }

    def emit(self, as_json: bool, out: Any = None) -> None:
        out = out if out is not None else sys.stdout
        if as_json:
            json.dump(self.as_dict(), out, indent=2)
            out.write("\n")
        else:
            for figure in self.items:
                out.write(figure.line() + "\n")
        out.flush()
