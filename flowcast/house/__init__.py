"""The house layer: House process, estate layouts, launcher and supervisor.

Users import from here, not from the modules below it.  Names resolve on
first use (PEP 562): reading a layout must not import the transport and
routing stacks a running house needs, and each house module runs this file
first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowcast.runtime.lazy import exports

_WHERE = {
    "House": "house",
    "load_house": "house",
    "EstateLayout": "layout",
    "LayoutError": "layout",
    "is_layout": "layout",
    "load_layout": "layout",
    "plan_houses": "layout",
    "launch": "estate",
    "open_house": "estate",
    "run_house": "estate",
    "Handoff": "handoff",
    "ChildSpec": "supervisor",
    "ChildStatus": "supervisor",
    "Supervisor": "supervisor",
    "read_status": "supervisorfile",
    "StatusError": "status",
    "run_trace": "trace",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = exports(__name__, _WHERE, globals())


if TYPE_CHECKING:
    from flowcast.house.estate import launch, open_house, run_house
    from flowcast.house.handoff import Handoff
    from flowcast.house.house import House, load_house
    from flowcast.house.layout import EstateLayout, LayoutError, is_layout, load_layout, plan_houses
    from flowcast.house.status import StatusError
    from flowcast.house.supervisor import ChildSpec, ChildStatus, Supervisor
    from flowcast.house.supervisorfile import read_status
    from flowcast.house.trace import run_trace
