"""The house layer: House process, estate layouts, launcher and supervisor.

Users import from here, not from the modules below it.  Names resolve on
first use (PEP 562): reading a layout must not import the transport and
routing stacks a running house needs, and each house module runs this file
first.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

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
    "read_status": "supervisor",
    "StatusError": "status",
    "run_trace": "trace",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from flowcast.house.estate import launch, open_house, run_house
    from flowcast.house.handoff import Handoff
    from flowcast.house.house import House, load_house
    from flowcast.house.layout import EstateLayout, LayoutError, is_layout, load_layout, plan_houses
    from flowcast.house.status import StatusError
    from flowcast.house.supervisor import ChildSpec, ChildStatus, Supervisor, read_status
    from flowcast.house.trace import run_trace
