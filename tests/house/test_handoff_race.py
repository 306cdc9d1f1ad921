"""The hand-off cannot be read by another process of the user while a house starts.

Was a finding: the hand-off (lane keys) sat in a pipe on the house's stdin
from before exec until the house read it, and until the house's
``prctl(PR_SET_DUMPABLE, 0)`` any same-user process could open
``/proc/PID/fd/0`` and read it.  Here a thief does exactly that, as fast as
it can, for every start of a house the supervisor makes.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

from flowcast.house.handoff import Handoff
from flowcast.house.supervisor import ChildSpec
from flowcast.transport.lanekeys import LaneKeys, new_secret
from tests.house.estates import ROOT
from tests.house.test_supervisor import by_name, log_text, supervising, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc and PR_SET_DUMPABLE are Linux's")


def _steal(pid: int) -> bytes:
    """What an unrelated process of the user reads from ``pid``'s stdin, if it can open it."""
    try:
        fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        return os.read(fd, 1 << 20)
    except OSError:
        return b""
    finally:
        os.close(fd)


def test_no_start_of_a_house_lets_a_same_user_process_read_its_hand_off(tmp_path):
    keys = LaneKeys.derive(new_secret(), "manor", ["manor", "w1"])
    # a hand-off for another yard: the worker reads it whole, names the mismatch, exits 2
    # and is restarted -- a fresh start, and a fresh chance for the thief, each time
    handoff = Handoff("manor", str(tmp_path / "beta.yaml"), "estate: beta\n", 2, ("manor", "w1"), keys).encode()
    child = _house(tmp_path, handoff)
    stolen: list[bytes] = []
    tries = 0
    with supervising([child], backoff_initial=0.01, backoff_max=0.05) as (sup, _):
        deadline = time.monotonic() + 30
        while log_text(child).count("not 'w1'") < 3 and time.monotonic() < deadline:
            pid = by_name(sup)["w1"].pid
            if pid is not None:
                tries += 1
                got = _steal(pid)
                if got:
                    stolen.append(got)
        wait_for(lambda: log_text(child).count("not 'w1'") >= 3, "three starts that read their whole hand-off")
    assert tries > 0
    assert stolen == [], f"another process read {len(stolen[0])} bytes of the hand-off"


def _house(tmp_path, handoff: bytes) -> ChildSpec:
    argv = [sys.executable, "-m", "flowcast.house.worker", str(tmp_path / "beta.yaml"), "--yard", "w1"]
    return ChildSpec("w1", argv, tmp_path / "logs" / "w1.log", cwd=ROOT, stdin=handoff)
