"""flowcast.transport: roads (UDP between estates) and lanes (Unix datagrams between yards).

    from flowcast.transport import Keep, RoadStack
    keep = Keep("/path/to/keep"); keep.ensure_local("alpha")
    road = RoadStack(UdpPort("127.0.0.1", 7530), keep, policy="once")

Names are imported lazily so ``flowcast.transport.port`` stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Acceptance",
    "Allowance",
    "Hooks",
    "Keep",
    "LaneStack",
    "Message",
    "Outgoing",
    "Presence",
    "RemoteRecord",
    "RoadStack",
    "Status",
    "serve",
]

_WHERE = {
    "Acceptance": "flowcast.transport.keep",
    "Allowance": "flowcast.transport.admission",
    "Hooks": "flowcast.transport.hooks",
    "Keep": "flowcast.transport.keep",
    "RemoteRecord": "flowcast.transport.keep",
    "Status": "flowcast.transport.keep",
    "LaneStack": "flowcast.transport.lane",
    "RoadStack": "flowcast.transport.road",
    "Message": "flowcast.transport.stack",
    "serve": "flowcast.transport.stack",
    "Outgoing": "flowcast.transport.outgoing",
    "Presence": "flowcast.transport.presence",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'flowcast.transport' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
