"""What the supervisor hands each house at start: its plan and its lane credentials.

Why a hand-off rather than each house reading the layout: a house restarted
an hour into a run would read the layout as it is *now*, so an edit made
meanwhile would apply to that one house and not the others -- a worker
with a flow or a policy its siblings do not have.  The launcher reads the
layout once; the text it read, the resolved house count and the yards of
its plan go to every house, and again, byte for byte, to every restart.

Why stdin: the hand-off carries the house's lane keys.  argv is readable
by every user (``/proc/PID/cmdline``); the environment and a 0600 file by
any process of the same user, for as long as they exist.  Stdin is a
socket (childpipe.py) the supervisor fills only once the house asks, and
the house asks only after it made itself non-dumpable
(``PR_SET_DUMPABLE``), which closes its ``/proc/PID/fd``, ``environ`` and
``mem`` to other processes of the user; it is read once, and then empty.
The supervisor, which holds every house's hand-off, does the same.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from flowcast.transport.lanekeys import LaneKeys

__all__ = ["Handoff", "MAX_HANDOFF", "read_handoff", "not_dumpable"]

#: Largest hand-off a house reads (the layout is at most 1 MiB of text).
MAX_HANDOFF = 4 << 20
VERSION = 1
_PR_SET_DUMPABLE = 4


def not_dumpable() -> bool:
    """Close this process's /proc files (fd, environ, mem) and ptrace to non-root processes of the user.

    For a process that holds lane keys (a house, its supervisor).  The cost:
    no core dumps, and a same-user debugger cannot attach.  Linux only;
    False where it could not be done.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        return False


@dataclass(frozen=True)
class Handoff:
    """One house's start: ``yard`` of the estate in ``layout_text`` (read from ``layout_path``)."""

    yard: str
    layout_path: str
    layout_text: str
    houses: int
    yards: tuple[str, ...]
    keys: LaneKeys
    #: Where the house records its events (``flowcast run LAYOUT --export DIR`` or the layout's
    #: ``export:``, as the launcher resolved them); None: it records nothing.
    export: str | None = None
    #: Seconds between the house's ticks (``flowcast run LAYOUT --period`` or the layout's ``period:``).
    period: float = 0.125

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": VERSION,
                "yard": self.yard,
                "layout": {"path": self.layout_path, "text": self.layout_text},
                "houses": self.houses,
                "yards": list(self.yards),
                "lane": self.keys.to_json(),
                "export": self.export,
                "period": self.period,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Handoff:
        """The hand-off in ``data``; ValueError naming what is wrong."""
        try:
            doc: Any = json.loads(data)
            if doc.get("version") != VERSION:
                raise ValueError(f"hand-off version {doc.get('version')!r}, expected {VERSION}")
            layout = doc["layout"]
            handoff = cls(
                str(doc["yard"]),
                str(layout["path"]),
                str(layout["text"]),
                int(doc["houses"]),
                tuple(str(y) for y in doc["yards"]),
                LaneKeys.from_json(doc["lane"]),
                None if doc.get("export") is None else str(doc["export"]),
                _period(doc.get("period", 0.125)),
            )
        except (KeyError, TypeError, AttributeError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"malformed hand-off: {error}") from None
        if handoff.keys.yard != handoff.yard:
            raise ValueError(f"hand-off for yard {handoff.yard!r} carries yard {handoff.keys.yard!r}'s keys")
        return handoff

    @property
    def path(self) -> Path:
        return Path(self.layout_path)


def read_handoff(stream: BinaryIO) -> Handoff:
    """Read the whole hand-off from ``stream`` (the house's stdin), up to EOF."""
    data = stream.read(MAX_HANDOFF + 1)
    if not data:
        raise ValueError("no hand-off on stdin: a house takes its plan from the supervisor ('flowcast run LAYOUT')")
    if len(data) > MAX_HANDOFF:
        raise ValueError(f"hand-off larger than {MAX_HANDOFF} bytes")
    return Handoff.decode(data)


def _period(value: object) -> float:
    """A tick period from the hand-off: a positive, finite number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 60:
        raise TypeError(f"period {value!r} is not a number of seconds in (0, 60]")
    return float(value)
