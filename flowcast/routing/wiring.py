"""Wiring a house's router to its lane and roads.

One set of functions serves both ways an application is put together: the
estate launcher calls them from a layout (``houses/*.yaml``), and the stock
behaviours call them from a flow script, as RAET's flo plans did.  Both get
the same stacks on the house's scheduler, closed when the house stops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from flowcast.routing.policy import Policy
from flowcast.routing.router import Router
from flowcast.store import HouseLike

__all__ = ["wire_router", "wire_lane", "wire_road", "join_remote"]


def wire_router(
    house: HouseLike,
    *,
    estate: str,
    yard: str,
    manor: str | None = None,
    policy: Iterable[Any] = (),
    default_channel: str = "main",
) -> Router:
    """Give ``house`` its Router (once; the same call again returns the first)."""
    if house.router is not None:
        router = house.router
        if (router.estate, router.yard) != (estate, yard):
            raise ValueError(
                f"this house already routes as yard {router.yard!r} of estate {router.estate!r}, not {yard!r} of {estate!r}"
            )
        return router
    router = Router(
        house.store,
        estate=estate,
        yard=yard,
        manor=manor,
        policy=Policy(policy),
        default_channel=default_channel,
        scheduler=house.scheduler,
    )
    house.router = router
    return router


def wire_lane(house: HouseLike, directory: str | Path, yards: Iterable[str], *, keys: Any) -> Any:
    """Bind this yard's socket in ``directory`` and accept the other ``yards``.

    ``keys`` (LaneKeys) must be given: an estate's houses pass the ones
    their supervisor handed them, so their lane datagrams are always
    authenticated; ``keys=None`` asks for a lane that trusts socket paths
    (a flow script wiring its own lane with ``lane.setup``).
    """
    from flowcast.transport.lane import LaneStack
    from flowcast.transport.ports import UxdPort, uxd_address

    router = _router(house)
    scheduler = house.scheduler
    port = UxdPort(directory, router.yard, scheduler=scheduler)
    others = {name: uxd_address(directory, name) for name in yards if name != router.yard}
    # Acknowledged: a yard killed mid-stream gets what it had not taken once it
    # is back, so nothing a road acknowledged to a remote sender is lost.
    try:
        lane = LaneStack(port, router.yard, others, scheduler=scheduler, acks=True, keys=keys)
    except BaseException:
        port.close()
        raise
    router.attach_lane(lane)
    house.on_close(lane.close)
    return lane


def wire_road(
    house: HouseLike,
    channel: str,
    *,
    keep: str | Path,
    host: str = "127.0.0.1",
    port: int = 0,
    acceptance: str = "once",
    role: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> Any:
    """Open road ``channel`` (a UDP port) with the estate's keep; the manor only."""
    from flowcast.transport.keep import Keep
    from flowcast.transport.keepwriter import KeepWriter
    from flowcast.transport.ports import UdpPort
    from flowcast.transport.road import RoadStack
    from flowcast.transport.roadmtu import is_loopback

    router = _router(house)
    where = Path(keep).resolve()
    store = router.keeps.get(where)
    if store is None:  # one Keep per directory: every road of the house shares it
        # Its writes go to a thread of their own: joins never wait for the disk on the roads' thread.
        writer = KeepWriter()
        store = router.keeps[where] = Keep(where, writer=writer)
        house.on_close(writer.close)
        store.ensure_local(router.estate, role=role)
    # GRO (the kernel joins a run of arriving datagrams into one read) pays where runs arrive: from other
    # hosts, in 1,232-byte datagrams (transport/roadmtu.py).  A road bound to loopback gets 64 KiB datagrams
    # and sparse round trips, where the extra ancillary data per read only costs.
    udp = UdpPort(host, port, scheduler=house.scheduler, gro=not is_loopback((host, port)))
    try:
        road = RoadStack(udp, store, policy=acceptance, scheduler=house.scheduler, **dict(options or {}))
        router.attach_road(channel, road)
    except BaseException:
        udp.close()
        raise
    house.on_close(road.close)
    return road


def join_remote(house: HouseLike, channel: str, host: str, port: int) -> Any:
    """Start joining the estate at ``(host, port)`` on road ``channel``."""
    router = _router(house)
    road = router.roads.get(channel)
    if road is None:
        raise ValueError(f"no road on channel {channel!r}: set it up first")
    return road.join((host, port))


def _router(house: HouseLike) -> Router:
    router = house.router
    if router is None:
        raise ValueError("this house has no router: run 'router setup' (or start it from an estate layout) first")
    return router
