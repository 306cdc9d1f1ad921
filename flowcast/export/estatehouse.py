"""Recording a house of an estate: what ``flowcast run LAYOUT --export DIR`` has every house do.

In the export layer because it is the export's recorder that it sets up;
the house layer below only calls it, handed in by the process entry point
(``flowcast.cli.worker``), so the house layer never imports the one above.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any


__all__ = ["follow", "record_house"]

log = logging.getLogger("flowcast.estate")


def record_house(house: Any, directory: str | Path, estate: str, yard: str) -> Any:
    """Record house ``yard``'s events under ``directory``, as ``flowcast run LAYOUT --export DIR`` does.

    What ``flowcast run FLOW --export DIR`` records for a flow house, for a
    house of an estate: its logged shares, its router's routed messages, its
    lane's and roads' message events (the stacks ``open_house`` wired), its
    CAST and causal events.  The export's house is the yard, unique in the
    estate (two yards of one entry run the same flow house).  A router,
    CAST or causal service set later is followed from the next tick on.
    The caller closes the recorder once the house has stopped (after its
    closers, so the stacks' last events are in).  Raises OSError or
    ValueError when the directory cannot be written (or another live writer
    holds this estate's and yard's journal there).
    """
    from flowcast.export.recorder import Recorder

    recorder = Recorder(directory, estate=estate, house=yard, clock=house.clock.now, out=lambda line: log.info("%s", line))
    try:
        recorder.watch_house(house)  # logged shares; house.cast and house.causal as wired already
        follow(house, recorder)  # the router, lane and roads wired already, and any the flow wires later
    except BaseException:
        recorder.close()
        raise
    return recorder


def follow(house: Any, recorder: Any) -> None:
    """After each of ``house``'s ticks: flush and rotate the recorder's segments, and pick up a router,
    lane, road, CAST or causal service the house gained since (a flow may wire its own at any time).

    One place for both ``flowcast run FLOW --export`` and an estate's houses, so the two record alike.
    """
    from flowcast.routing.events import follow_house

    chores = [follow_house(house, recorder), recorder.follow_cast(house), recorder.follow_causal(house)]
    for chore in chores:
        chore()  # what is wired already is recorded from the start, not from the end of the first tick
    house.skedder.after_tick.extend([recorder.poll, *chores])
