"""How ``flowcast status`` shows a snapshot: the text view, apart from reading.

Split from status.py, which reads the files a running estate writes and
merges them into a snapshot; this module only turns that snapshot into
lines for a terminal.  Everything it prints from a status file goes
through ``_clean``: the files are written by processes that may be
broken, and their text must not drive the terminal.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from flowcast.house.joining import JoinTries

__all__ = ["render", "RATE_KEYS", "LIVE_STATES", "TOP_ROUTES", "LAST_DENIALS"]

#: Per-second rates shown, in this order.
RATE_KEYS = ("sent", "delivered", "to_road", "from_road", "to_lane", "from_lane")
#: Supervisor states in which a house has a live process.
LIVE_STATES = ("starting", "running", "stopping")
TOP_ROUTES = 10
LAST_DENIALS = 5
#: Lines of one house's last error shown (a flow's errors are one line each).
ERROR_LINES = 5


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clean(value: Any, limit: int = 120) -> str:
    """Text from a status file made safe for a terminal: no control characters, bounded."""
    text = str(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return _cut(text, limit)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0:
        return "0s"
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}"


def _table(rows: list[list[str]], indent: str = "  ", right: Sequence[int] = ()) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _clock(at: float | None) -> str:
    return "--:--:--" if at is None else time.strftime("%H:%M:%S", time.localtime(at))


def _supervisor_line(sup: dict[str, Any]) -> str:
    if sup["status"] != "ok":
        return f"supervisor: {sup['status']}"
    state = _clean(sup["state"] or "?", 20)
    if sup["pid"] is None:
        return f"supervisor: {state} (no pid)"
    if sup["alive"]:
        return f"supervisor: pid {sup['pid']} alive, {state}"
    if sup["state"] == "stopped":
        return f"supervisor: pid {sup['pid']} exited, stopped"
    return f"supervisor: pid {sup['pid']} NOT RUNNING (last state {state}, written {_duration(sup['age'])} ago)"


def _house_row(house: dict[str, Any]) -> list[str]:
    state = house["state"] or "-"
    if house["state"] in LIVE_STATES and house["alive"] is False:
        state = f"gone ({house['state']})"
    notes = []
    if house["status"] == "ok":
        status = f"{_duration(house['age'])} ago"
    elif house["status"] == "stale":
        status = "STALE" + (f" ({_duration(house['age'])} ago)" if house["age"] is not None else "")
    else:
        status = house["status"]
    if house["note"]:
        notes.append(house["note"])
    if house["state"] == "held":  # exit 3 (childproc.EXIT_HOLD): it refused to start, a restart cannot help
        notes.append("refused to start, not restarted" if house["last_exit"] == 3 else "failed too often, not restarted")
    if house["state"] == "backoff" and house["restart_in"] is not None:
        notes.append(f"restart in {_duration(house['restart_in'])}")
    if house["last_exit"] is not None and house["state"] not in LIVE_STATES:
        code = house["last_exit"]
        notes.append(f"last exit {'signal ' + str(-code) if code < 0 else code}")
    if notes:
        status += "; " + ", ".join(notes)
    return [
        _clean(house["yard"], 32) + (" *" if house["manor"] else ""),
        _clean(state, 24),
        "-" if house["pid"] is None else str(house["pid"]),
        "-" if house["restarts"] is None else str(house["restarts"]),
        _duration(house["uptime"]),
        _clean(status, 100),
    ]


def _last_errors(houses: list[dict[str, Any]]) -> list[str]:
    """Each house's last error, as it said it: why a house is held or in back-off, without opening its log."""
    out = []
    for house in houses:
        text = house.get("last_error")
        if not text:
            continue
        said = text.splitlines() or [""]
        more = len(said) - ERROR_LINES
        said = said[:ERROR_LINES] + ([f"... {more} more lines"] if more > 0 else [])
        out.append(f"  {_clean(house['yard'], 32)} last error: {_clean(said[0], 200)}")
        out += [f"    {_clean(line, 200)}" for line in said[1:]]
    return out


def _presence(presence: str, tries: dict[str, Any] | None, now: float) -> str:
    """A remote's presence, and for one not joined (never, or not again since it was lost) where the
    manor tries it and the last answer: what an operator checks first when a remote never joins."""
    if not tries or tries.get("answer") == "accepted" or presence in ("joined", "allowed", "alive"):
        return presence
    return f"{'not joined' if presence in ('no presence yet', 'unknown') else presence}; {JoinTries.describe(tries, now)}"


def render(snapshot: dict[str, Any]) -> str:
    """The snapshot as the text ``flowcast status`` prints (ending in a newline)."""
    lines = []
    estate = _clean(snapshot["estate"], 64) if snapshot["estate"] else "?"
    lines.append(f"estate {estate}   run {_clean(snapshot['run'], 200)}   at {_clock(snapshot['taken'])}")
    for problem in snapshot["problems"]:
        lines.append(f"! {_clean(problem, 200)}")
    lines.append(_supervisor_line(snapshot["supervisor"]))

    houses = snapshot["houses"]
    lines.append("")
    if houses:
        lines.append(f"houses ({len(houses)}; * = manor)")
        rows = [["yard", "state", "pid", "restarts", "uptime", "status"]]
        rows += [_house_row(h) for h in houses]
        lines += _table(rows, right=(2, 3, 4))
        lines += _last_errors(houses)
    else:
        lines.append("houses: none have reported yet")
    yards = snapshot["yards"]
    lines.append("lane: " + (", ".join(_clean(y, 32) for y in yards) if yards else "-"))

    roads = snapshot["roads"]
    lines.append("")
    if roads:
        lines.append("roads")
        for channel, road in roads.items():
            if road["port"] is not None:
                where = f"bound {_clean(road['port'][0], 64)}:{road['port'][1]}"
            elif road["configured"] is not None:
                where = f"configured {_clean(road['configured'][0], 64)}:{road['configured'][1]}"
            else:
                where = "port unknown"
            if road["yard"] is None:
                where += ", not reported"
            else:
                where += f", by {_clean(road['yard'], 32)}"
                if road["status"] != "ok":
                    where += f" ({_clean(road['status'], 60)})"
            lines.append(f"  {_clean(channel, 32)}: {where}")
            remotes = road["remotes"]
            if remotes:
                unknown = "not reported" if road["yard"] is None else "no presence yet"
                joining = road.get("joining") or {}
                rows = [[_clean(name, 64), _presence(presence or unknown, joining.get(name), snapshot["taken"])]
                        for name, presence in remotes.items()]
                lines += _table([[_clean(name, 64), _clean(cell, 240)] for name, cell in rows], indent="    ")
            else:
                lines.append("    no remote estates")
            joins = road.get("joins") or {}
            if joins:
                lines.append("    joins: " + ", ".join(f"{_clean(k, 32).replace('_', ' ')} {n}" for k, n in sorted(joins.items())))
    else:
        lines.append("roads: none")

    lines.append("")
    lines.append("rates (messages per second)")
    rows = [["yard", *RATE_KEYS]]
    for house in houses:
        if house["status"] in ("ok", "stale"):
            label = _clean(house["yard"], 32) + (" (stale)" if house["status"] == "stale" else "")
            rows.append([label, *(_rate(house["rates"].get(k, 0)) for k in RATE_KEYS)])
    rows.append(["total", *(_rate(snapshot["rates"].get(k, 0)) for k in RATE_KEYS)])
    lines += _table(rows, right=range(1, len(RATE_KEYS) + 1))
    left_out = [h["yard"] for h in houses if h["yard"] not in snapshot["rates_from"]]
    if left_out:
        lines.append("  (total of fresh houses only; left out: " + ", ".join(_clean(y, 32) for y in left_out) + ")")

    routes = snapshot["routes"]
    lines.append("")
    if routes:
        lines.append(f"routes (top {min(TOP_ROUTES, len(routes))} of {len(routes)}, messages)")
        rows = [
            [
                str(r["messages"]),
                f"{_clean(r['src'], 80)} -> {_clean(r['dst'], 80)}",
                "via " + ", ".join(_clean(y, 32) for y in r["via"]),
            ]
            for r in routes[:TOP_ROUTES]
        ]
        lines += _table(rows, right=(0,))
    else:
        lines.append("routes: none yet")

    denials = snapshot["denials"]
    policy = snapshot["policy"]
    lines.append("")
    kinds = ", ".join(f"{_clean(k, 32)} {n}" for k, n in denials["by_kind"].items())
    lines.append(f"denials {denials['count']}" + (f" ({kinds})" if kinds else ""))
    back = snapshot.get("errors_back") or {"count": 0, "by_kind": {}}
    if back["count"]:  # refused elsewhere: the sender's operator sees it here, not only the receiver's
        returned = ", ".join(f"{_clean(k, 32)} {n}" for k, n in back["by_kind"].items())
        lines.append(f"errors back {back['count']} ({returned}): this estate's messages refused elsewhere, in SHARE.error")
    lines.append(
        f"policy: allowed {policy.get('allowed', 0)}, denied {policy.get('denied', 0)}"
        + (f", replaced {policy['replaced']}" if policy.get("replaced") else "")
    )
    last = denials["last"][-LAST_DENIALS:]
    if last:
        lines.append(f"last {len(last)} denials")
        for d in last:
            src = _clean(d["src"] or "?", 80)
            dst = _clean(d["dst"] or "?", 80)
            tag = f" [{_clean(d['tag'], 64)}]" if d["tag"] else ""
            where = f"{_clock(d['at'])} {_clean(d['yard'], 32)} {_clean(d['kind'], 32)}"
            lines.append(f"  {where}: {src} -> {dst}{tag}: {_clean(d['reason'], 160)}")
    return "\n".join(lines) + "\n"
