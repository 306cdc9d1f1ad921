"""``flowcast status``: show a running estate from the files it writes.

    flowcast status LAYOUT_OR_RUN_DIR [--once] [--json] [--interval SECONDS] [--count N]

A running estate writes its state into its run directory (``run:`` in the
layout, default ``run/<estate>``):

* ``supervisor.json`` -- the supervisor's pid and each house's state
  (starting, running, backoff, held, stopping, stopped), pid, restarts,
  start time and last error (why it last exited with an error, in its own
  words), rewritten whenever one of them changes;
* ``status/<yard>.json`` -- each house's router status (lane yards, road
  presence, message counts, top routes, recent denials, policy counts) plus
  its pid, start time, the time of writing and its message rates, rewritten
  every second (``flowcast.house.estate.STATUS_PERIOD``).

This command only reads those files -- it never talks to the houses -- so
it works the same while the estate runs, after it crashed and after it
stopped.  Every file is read defensively: a missing one is "no status yet",
an unreadable, truncated or malformed one is reported as "unreadable: ..."
and the rest is shown anyway.  A house whose status was written more than
three periods ago is marked stale (its rates are then left out of the sum).

Without ``--once``/``--json`` the view refreshes every ``--interval``
seconds until ^C (or ``--count`` refreshes): redrawn in place on a
terminal, one block per refresh (separated by a blank line) otherwise.
``--json`` prints one merged snapshot as a JSON object.

Some numbers are approximations by nature: rates are what each house saw
over its last status period; a route's count is the largest count any
house reported for it (a message to another estate passes its own house
and the manor, so summing would count it twice); counts restart from zero
when a house restarts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import stat
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from flowcast.errors import Error
from flowcast.runtime.clock import wall_now
from flowcast.house.statusview import LAST_DENIALS, LIVE_STATES, RATE_KEYS, TOP_ROUTES, _cut, render  # noqa: F401 - re-exported

__all__ = ["main", "collect", "render", "watch", "resolve", "STATUS_PERIOD", "STALE_AFTER"]

#: How often a house writes its status (``flowcast.house.estate.STATUS_PERIOD``;
#: not imported, so this command does not load the whole house stack).
STATUS_PERIOD = 1.0
#: A house status older than this many periods is stale.
STALE_AFTER = 3
#: Status files are small; anything larger is not one.
MAX_FILE_BYTES = 4 << 20
#: At most this many status files are read (a run dir is one estate's houses).
MAX_HOUSES = 1024

#: Router counters that count refused messages (each also noted as a denial).
REFUSAL_KINDS = frozenset(
    {
        "spoofed", "misrouted", "denied", "malformed", "no_road", "no_remote", "no_lane", "no_yard",
        "no_share", "unreadable", "queue_full", "update_failed", "undelivered",
    }
)
JSON_DENIALS = 20
NO_STATUS = "no status yet"

# The clock and the pause between refreshes, looked up at call time (tests replace them).
_wall = wall_now
_sleep = time.sleep


class StatusError(Error):
    """The argument names no run directory (or no readable layout): exit 2."""


# -- reading ------------------------------------------------------------------


def read_json(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(document, None)``, or ``(None, problem)`` -- never raises for what is on disk."""
    try:
        # Non-blocking, so a FIFO in the status directory cannot hang the command.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, NO_STATUS
    except OSError as error:
        return None, f"unreadable: {error.strerror or error}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "unreadable: not a regular file"
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        return None, f"unreadable: {error.strerror or error}"
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        return None, f"unreadable: larger than {MAX_FILE_BYTES} bytes"
    if not data.strip():
        return None, "unreadable: empty file"
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        return None, f"unreadable: not UTF-8 ({error.reason} at byte {error.start})"
    except (ValueError, RecursionError) as error:  # JSONDecodeError is a ValueError
        return None, f"unreadable: not JSON ({_cut(str(error), 80)})"
    if not isinstance(document, dict):
        return None, f"unreadable: a JSON {type(document).__name__}, not an object"
    return document, None


def _num(value: Any) -> float | None:
    """A finite number from JSON, else None (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _numbers(value: Any) -> dict[str, float]:
    """The finite numeric entries of a JSON object (counts, rates, policy)."""
    out = {}
    for key, number in _dict(value).items():
        if _int(number) is not None:
            out[key] = number
        elif _num(number) is not None:
            out[key] = number
    return out


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a reused pid looks alive too)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, someone else's
        return True
    except (OSError, OverflowError):
        return False
    return True


def parent_of(pid: int) -> int | None:
    """The parent pid of live process ``pid`` from ``/proc`` (Linux); None when unknown or gone.

    Why: a pid alone does not say it is still our house.  Houses are the
    supervisor's children and die with it (PR_SET_PDEATHSIG), so a house pid
    whose parent is not the supervisor is an orphan on its way out, or the
    pid was reused by an unrelated process; either way not a running house.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read(4096)
    except OSError:
        return None
    try:
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] == b"Z":  # a zombie has exited: only its parent has not reaped it yet
            return 0
        return int(fields[1])
    except (ValueError, IndexError):
        return None


# -- the snapshot ---------------------------------------------------------------


def resolve(target: str | Path) -> tuple[Path, str | None, dict[str, Any]]:
    """``(run dir, estate name or None, configured roads)`` for a layout file or a run dir.

    Raises :class:`StatusError` when there is no such directory, or the
    layout cannot be loaded.
    """
    path = Path(target)
    if path.is_dir():
        return path.resolve(), None, {}
    if path.is_file():
        from flowcast.house.layout import LayoutError, load_layout

        try:
            layout = load_layout(path)
        except LayoutError as error:
            raise StatusError(
                f"{path} is not a usable estate layout (give its run directory instead):\n{error}"
            ) from None
        if not layout.run.is_dir():
            raise StatusError(
                f"estate {layout.estate} has no run directory {layout.run} "
                f"(not started here yet? start it with 'flowcast run {path}')"
            )
        roads = {
            channel: {"host": road.host, "port": road.port, "remotes": [r.estate for r in road.remotes]}
            for channel, road in layout.roads.items()
        }
        return layout.run, layout.estate, roads
    if path.exists():
        raise StatusError(f"{path} is neither an estate layout file nor a run directory")
    if path.suffix in (".yaml", ".yml"):
        raise StatusError(f"no such layout file: {path}")
    raise StatusError(f"no such run directory: {path}")


def collect(
    run: Path,
    *,
    estate: str | None = None,
    roads: dict[str, Any] | None = None,
    now: float | None = None,
    alive: Callable[[int], bool] | None = None,
    period: float = STATUS_PERIOD,
    parent: Callable[[int], int | None] | None = None,
) -> dict[str, Any]:
    """Everything ``flowcast status`` shows, merged from the run dir's files, as plain JSON data.

    ``now`` (wall-clock seconds), ``alive(pid)`` and ``parent(pid)`` default
    to the real ones (``parent`` only with the real ``alive``: a test's
    made-up pids must not be looked up in ``/proc``).  Every pid shown is
    checked: a house is alive only if its pid exists and, where ``/proc``
    says, is still its supervisor's child -- after a ``kill -9`` of the
    supervisor its houses are gone, whatever the status file last said.
    """
    if parent is None and alive is None:
        parent = parent_of
    now = _wall() if now is None else now
    alive = pid_alive if alive is None else alive
    stale_after = STALE_AFTER * period
    problems: list[str] = []
    if not run.is_dir():
        problems.append(f"run directory {run} is gone")

    # supervisor.json
    sup_doc, sup_problem = read_json(run / "supervisor.json")
    sup_doc = sup_doc or {}
    sup_pid = _int(sup_doc.get("supervisor_pid"))
    sup_updated = _num(sup_doc.get("updated"))
    supervisor = {
        "status": sup_problem or "ok",
        "pid": sup_pid,
        "alive": alive(sup_pid) if sup_pid is not None else None,
        "state": _str(sup_doc.get("state")),
        "updated": sup_updated,
        "age": None if sup_updated is None else now - sup_updated,
    }
    supervised: dict[str, dict[str, Any]] = {}
    for entry in _list(sup_doc.get("houses")):
        name = _str(_dict(entry).get("name"))
        if name and name not in supervised:
            supervised[name] = entry

    # status/<yard>.json
    statuses: dict[str, tuple[dict[str, Any] | None, str | None]] = {}
    status_dir = run / "status"
    try:
        names = sorted(
            p.name for p in status_dir.iterdir() if p.name.endswith(".json") and not p.name.startswith(".")
        )
    except FileNotFoundError:
        names = []
    except OSError as error:
        names = []
        problems.append(f"status directory unreadable: {error.strerror or error}")
    if len(names) > MAX_HOUSES:
        problems.append(f"{len(names)} status files; showing the first {MAX_HOUSES}")
        names = names[:MAX_HOUSES]
    for name in names:
        statuses[name[: -len(".json")]] = read_json(status_dir / name)
    for yard in supervised:
        if yard not in statuses:
            statuses[yard] = read_json(status_dir / f"{yard}.json")

    houses = []
    for yard in [*supervised, *sorted(y for y in statuses if y not in supervised)]:
        houses.append(_house(yard, supervised.get(yard), *statuses[yard], now, stale_after, alive, sup_pid, parent))
    houses.sort(key=lambda h: not h["manor"])  # the manor first; otherwise supervisor order

    if estate is None:
        for yard in statuses:
            estate = _str(_dict(statuses[yard][0]).get("estate"))
            if estate:
                break
    fresh = [h for h in houses if h["status"] == "ok"]
    return {
        "estate": estate,
        "run": str(run),
        "taken": now,
        "problems": problems,
        "supervisor": supervisor,
        "houses": houses,
        "yards": _yards(houses, statuses),
        "roads": _roads(houses, statuses, roads or {}),
        "rates": _sum(h["rates"] for h in fresh),
        "rates_from": [h["yard"] for h in fresh],
        "counts": _sum(h["counts"] for h in houses),
        "routes": _routes(statuses),
        "denials": _denials(houses, statuses),
        "errors_back": _errors_back(houses),
        "policy": _sum(h["policy"] for h in houses),
    }


def _house(
    yard: str,
    sup: dict[str, Any] | None,
    doc: dict[str, Any] | None,
    problem: str | None,
    now: float,
    stale_after: float,
    alive: Callable[[int], bool],
    sup_pid: int | None = None,
    parent: Callable[[int], int | None] | None = None,
) -> dict[str, Any]:
    sup = _dict(sup)
    doc = doc or {}
    state = _str(sup.get("state"))
    pid = _int(sup.get("pid")) if sup else _int(doc.get("pid"))
    status_pid = _int(doc.get("pid"))
    started = _num(sup.get("started_at")) if sup else _num(doc.get("started"))
    updated = _num(doc.get("updated"))
    age = None if updated is None else now - updated
    status = problem or "ok"
    note = None
    if problem is None:
        if age is None:
            status, note = "stale", "no update time"
        elif age > stale_after:
            status = "stale"
        elif sup and pid is not None and status_pid is not None and status_pid != pid:
            status, note = "stale", f"written by earlier pid {status_pid}"
    is_alive = alive(pid) if pid is not None else None
    if is_alive and sup and sup_pid is not None and parent is not None:
        ppid = parent(pid)  # type: ignore[arg-type]
        if ppid is not None and ppid != sup_pid:
            is_alive = False
            note = note or f"pid {pid} is no longer its supervisor's child"
    live = state in LIVE_STATES if sup else status == "ok"
    manor = doc.get("manor") is True or (_str(doc.get("manor")) == yard)
    next_start = _num(sup.get("next_start"))
    return {
        "yard": yard,
        "house": _str(doc.get("house")),
        "manor": manor,
        "state": state,
        "pid": pid,
        "alive": is_alive,
        "restarts": _int(sup.get("restarts")),
        "last_exit": _int(sup.get("last_exit")),
        "last_error": _str(sup.get("last_error")),
        "restart_in": None if next_start is None else max(0.0, next_start - now),
        "started": started,
        "uptime": now - started if live and started is not None and is_alive is not False else None,
        "status": status,
        "note": note,
        "updated": updated,
        "age": age,
        "rates": _numbers(doc.get("rates")),
        "counts": _numbers(doc.get("counts")),
        "policy": _numbers(doc.get("policy")),
    }


def _sum(dicts: Iterable[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for numbers in dicts:
        for key, value in numbers.items():
            total[key] = total.get(key, 0) + value
    return total


def _yards(houses: list[dict[str, Any]], statuses: dict[str, tuple[dict[str, Any] | None, str | None]]) -> list[str]:
    """The lane's yards: those the houses name as their peers, and the houses that reported."""
    seen: set[str] = set()
    for yard, (doc, _) in statuses.items():
        if doc is not None:
            seen.add(yard)
        seen.update(y for y in _list(_dict(doc).get("yards")) if isinstance(y, str))
    order = [h["yard"] for h in houses if h["yard"] in seen]
    return order + sorted(seen.difference(order))


def _roads(
    houses: list[dict[str, Any]], statuses: dict[str, tuple[dict[str, Any] | None, str | None]], configured: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """``{channel: {port, yard, status, remotes: {estate: presence}, joining: {estate: tries}}}``; the first
    house (the manor) wins.  ``joining`` is what the manor tried for each remote the layout names
    (flowcast.house.joining): shown for a remote that has not joined."""
    roads: dict[str, dict[str, Any]] = {}
    for channel, spec in configured.items():
        roads[channel] = {
            "port": None,
            "configured": [spec["host"], spec["port"]],
            "yard": None,
            "status": "not reported",
            "remotes": {name: None for name in spec["remotes"]},
        }
    for house in houses:
        doc = _dict(statuses[house["yard"]][0])
        ports = _dict(doc.get("ports"))
        for channel, remotes in _dict(doc.get("roads")).items():
            road = roads.setdefault(
                channel, {"port": None, "configured": None, "yard": None, "status": "not reported", "remotes": {}}
            )
            if road["yard"] is not None:
                continue
            road["yard"] = house["yard"]
            road["status"] = house["status"]
            port = _list(ports.get(channel))
            if len(port) >= 2 and isinstance(port[0], str) and _int(port[1]) is not None:
                road["port"] = [port[0], port[1]]
            for name, presence in _dict(remotes).items():
                road["remotes"][name] = _str(presence) or "unknown"
            joining = _dict(_dict(doc.get("joining")).get(channel))
            road["joining"] = {name: _dict(entry) for name, entry in joining.items() if isinstance(name, str)}
            for name in road["joining"]:
                road["remotes"].setdefault(name, None)
            joins = _dict(_dict(doc.get("joins")).get(channel))
            road["joins"] = {_str(k) or "?": n for k, n in joins.items() if _int(n)}
    return roads


def _routes(statuses: dict[str, tuple[dict[str, Any] | None, str | None]]) -> list[dict[str, Any]]:
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for yard, (doc, _) in statuses.items():
        for row in _list(_dict(doc).get("routes")):
            row = _list(row)
            if len(row) < 3 or not isinstance(row[0], str) or not isinstance(row[1], str) or _int(row[2]) is None:
                continue
            entry = merged.setdefault((row[0], row[1]), {"src": row[0], "dst": row[1], "messages": 0, "via": []})
            entry["messages"] = max(entry["messages"], row[2])
            entry["via"].append(yard)
    return sorted(merged.values(), key=lambda e: (-e["messages"], e["src"], e["dst"]))


def _errors_back(houses: list[dict[str, Any]]) -> dict[str, Any]:
    """Errors that came back for this estate's own messages (refused elsewhere), by kind."""
    by_kind: dict[str, float] = {}
    for house in houses:
        for key, n in house["counts"].items():
            if key.startswith("errors_back_") and n:
                kind = key[len("errors_back_"):]
                by_kind[kind] = by_kind.get(kind, 0) + n
    return {"count": sum(by_kind.values()), "by_kind": dict(sorted(by_kind.items(), key=lambda kv: (-kv[1], kv[0])))}


def _denials(
    houses: list[dict[str, Any]], statuses: dict[str, tuple[dict[str, Any] | None, str | None]]
) -> dict[str, Any]:
    last = []
    kinds = set(REFUSAL_KINDS)
    for yard, (doc, _) in statuses.items():
        for entry in _list(_dict(doc).get("denials")):
            entry = _dict(entry)
            kind = _str(entry.get("kind"))
            if kind is None:
                continue
            kinds.add(kind)
            last.append(
                {
                    "yard": yard,
                    "at": _num(entry.get("at")),
                    "kind": kind,
                    "src": _str(entry.get("src")) or "",
                    "dst": _str(entry.get("dst")) or "",
                    "tag": _str(entry.get("tag")) or "",
                    "reason": _str(entry.get("reason")) or "",
                }
            )
    last.sort(key=lambda e: e["at"] if e["at"] is not None else -math.inf)
    by_kind: dict[str, float] = {}
    for house in houses:
        for kind, n in house["counts"].items():
            if kind in kinds and n:
                by_kind[kind] = by_kind.get(kind, 0) + n
    return {
        "count": sum(by_kind.values()),
        "by_kind": dict(sorted(by_kind.items(), key=lambda kv: (-kv[1], kv[0]))),
        "last": last[-JSON_DENIALS:],
    }


# -- the command ----------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowcast status",
        description="Show a running estate: houses, lane, remote estates, routes, message rates, denials.",
    )
    parser.add_argument("target", metavar="LAYOUT_OR_RUN_DIR", help="an estate layout (houses/ESTATE.yaml) or its run directory")
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    parser.add_argument("--json", action="store_true", help="print one snapshot as a JSON object (implies --once)")
    parser.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="seconds between refreshes (default 1)")
    parser.add_argument("--count", type=int, default=None, metavar="N", help="stop after N refreshes (default: until ^C)")
    return parser


def watch(
    snapshot: Callable[[], dict[str, Any]],
    *,
    interval: float,
    count: int | None,
    out: TextIO,
    tty: bool,
    sleep: Callable[[float], None] | None = None,
) -> None:
    """Print ``render(snapshot())`` ``count`` times (None: forever), ``interval`` apart."""
    sleep = _sleep if sleep is None else sleep
    shown = 0
    while count is None or shown < count:
        if shown:
            sleep(interval)
        text = render(snapshot())
        if tty:
            # Home, each line clearing its rest, then clear below: no flicker.
            out.write("\x1b[H" + text.replace("\n", "\x1b[K\n") + "\x1b[J")
        else:
            out.write(("\n" if shown else "") + text)
        out.flush()
        shown += 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not (args.interval > 0 and math.isfinite(args.interval)):
        print("flowcast status: --interval must be a positive number of seconds", file=sys.stderr)
        return 2
    if args.count is not None and args.count < 1:
        print("flowcast status: --count must be at least 1", file=sys.stderr)
        return 2
    try:
        run, estate, roads = resolve(args.target)
    except StatusError as error:
        print(f"flowcast status: {error}", file=sys.stderr)
        return 2
    out = sys.stdout

    def snapshot() -> dict[str, Any]:
        return collect(run, estate=estate, roads=roads)

    try:
        if args.json:
            out.write(json.dumps(snapshot(), indent=2) + "\n")
            out.flush()
        else:
            count = 1 if args.once else args.count
            watch(snapshot, interval=args.interval, count=count, out=out, tty=out.isatty())
    except KeyboardInterrupt:
        if out.isatty():
            out.write("\n")
        return 0
    except BrokenPipeError:  # e.g. piped into head: stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
