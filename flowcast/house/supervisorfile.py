"""Reading a supervisor's status file (``RUN/supervisor.json``), for ``flowcast status`` and tools.

Apart from flowcast.house.supervisor because the reader is another
process: it needs the file's meaning (is the writer still alive?), not the
supervisor's policy of starting, restarting and stopping houses.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["read_status"]


def read_status(path: Path) -> dict[str, Any] | None:
    """Read a status file written by a Supervisor, for ``flowcast status``.

    Returns None if there is no file. Adds ``"alive"``: whether the supervisor
    process that wrote it still exists, since a supervisor killed with SIGKILL
    cannot mark its file stopped (its houses die with it, see PR_SET_PDEATHSIG).
    """
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    pid = doc.get("supervisor_pid")
    alive = False
    if isinstance(pid, int) and pid > 0:
        try:
            os.kill(pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        except PermissionError:  # exists, owned by someone else
            alive = True
    doc["alive"] = alive and doc.get("state") != "stopped"
    return doc


