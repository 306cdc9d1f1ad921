"""An estate on one host: its houses as processes, wired by its layout.

``launch`` is what ``flowcast run houses/ESTATE.yaml`` does: plan one house
per core, then hand the plan to a Supervisor that runs each house as
``python -m flowcast.house.worker LAYOUT --yard YARD``.  ``open_house`` is
what that worker does: build the house's flow, give it a router, join the
estate's lane and -- in the manor -- open the roads and join the remotes
the layout names.  Every house writes a status file once a second, which
``flowcast status`` reads; nothing is shared between houses but the lane.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from flowcast.house.house import House, load_house
from flowcast.house.layout import EstateLayout, HousePlan, load_layout, plan_houses
from flowcast.routing.wiring import wire_lane, wire_road, wire_router
from flowcast.runtime import sleep

__all__ = ["launch", "open_house", "run_house", "status_dir", "lane_dir", "STATUS_PERIOD"]

log = logging.getLogger("flowcast.estate")
STATUS_PERIOD = 1.0


def lane_dir(layout: EstateLayout) -> Path:
    return layout.run / "lane"


def status_dir(layout: EstateLayout) -> Path:
    return layout.run / "status"


def log_dir(layout: EstateLayout) -> Path:
    return layout.run / "logs"


def _find(plan: list[HousePlan], yard: str) -> HousePlan:
    for entry in plan:
        if entry.yard == yard:
            return entry
    raise ValueError(f"yard {yard!r} is not in this estate's plan (yards: {', '.join(p.yard for p in plan)})")


def open_house(
    layout: EstateLayout, yard: str, *, houses: int | None = None, period: float = 0.125, freeze: bool = False
) -> House:
    """Build yard ``yard``'s house from ``layout`` and wire it; the caller runs it."""
    plan = plan_houses(layout, houses)
    mine = _find(plan, yard)
    manor = plan[0].yard
    house = load_house(mine.entry.flow, mine.entry.house, freeze=freeze, period=period)
    channels = list(layout.roads)
    wire_router(
        house,
        estate=layout.estate,
        yard=yard,
        manor=manor,
        policy=[_rule(rule) for rule in layout.policy],
        default_channel=channels[0] if channels else "main",
    )
    wire_lane(house, lane_dir(layout), [p.yard for p in plan])
    if mine.manor:
        for road in layout.roads.values():
            stack = wire_road(
                house, road.channel, keep=layout.keep, host=road.host, port=road.port,
                acceptance=road.acceptance, role=layout.role, options=road.stack_options(),
            )
            log.info("road %s on %s:%d", road.channel, *stack.address[:2])
            for remote in road.remotes:
                house.scheduler.spawn(
                    _keep_joined(stack, remote.estate, (remote.host, remote.port)), name=f"join:{road.channel}:{remote.estate}"
                )
    return house


def _keep_joined(road: Any, estate: str, address: tuple[str, int]):  # type: ignore[no-untyped-def]
    """A micro-thread: join ``estate`` at ``address``, and again whenever it is not allowed.

    Estates start in any order and restart: one join at start that times
    out would leave the road unjoined for good.  Tries back off from 1 s to
    30 s; a refusal (a pinned key that changed, a ``never`` policy) is
    logged each time, not hidden.
    """
    delay = 1.0
    while not road.closed:
        if road.is_allowed(estate):
            delay = 1.0
            yield sleep(5.0)
            continue
        attempt = road.join(address, timeout=min(delay * 2, 10.0))
        for _ in range(200):  # at most 10 s of 50 ms looks
            if attempt.result is not None or road.is_allowed(estate):
                break
            yield sleep(0.05)
        if attempt.result in ("refused", "pending"):
            log.warning("join %s at %s:%d: %s %s", estate, *address, attempt.result, attempt.reason)
        if not road.is_allowed(estate):
            log.info("join %s at %s:%d: %s; again in %g s", estate, *address, attempt.result or "waiting", delay)
            yield sleep(delay)
            delay = min(delay * 2, 30.0)


def _rule(rule: Any) -> dict[str, str]:
    out = {rule.effect: rule.access}
    for name in ("estate", "role", "share", "tag", "channel"):
        out[name] = getattr(rule, name)
    return out


def _status_writer(house: House, path: Path, yard: str, manor: bool):  # type: ignore[no-untyped-def]
    """A micro-thread: the house's status (and message rates) into ``path`` each period."""
    started = time.time()
    previous: dict[str, int] | None = None  # no rates before a second look
    previous_at = time.monotonic()
    while True:
        now = time.monotonic()
        router = house.router
        status = router.status() if router is not None else {}
        counts = status.get("counts", {})
        span = max(now - previous_at, 1e-6)
        status["rates"] = {
            key: 0.0 if previous is None else (value - previous.get(key, 0)) / span for key, value in counts.items()
        }
        previous, previous_at = dict(counts), now
        status.update(
            {"pid": os.getpid(), "house": house.name, "started": started, "updated": time.time(), "manor": manor, "yard": yard}
        )
        if router is not None:
            status["ports"] = {ch: list(road.address[:2]) for ch, road in router.roads.items()}
        try:
            # Replaced whole (readers never see half a file) but not fsynced:
            # a status is worth nothing after a crash, and a house must not
            # stall on the disk once a second.
            temporary = path.with_name(f".{path.name}.{os.getpid()}")
            temporary.write_bytes(json.dumps(status, default=str).encode())
            os.replace(temporary, path)
        except (OSError, TypeError, ValueError) as error:
            log.warning("status file %s: %s", path, error)
        yield sleep(STATUS_PERIOD)


def run_house(layout_path: str | Path, yard: str, *, houses: int | None = None) -> int:
    """Run one house of an estate in this process until SIGINT/SIGTERM."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {yard} %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    layout = load_layout(layout_path)
    try:
        house = open_house(layout, yard, houses=houses, freeze=True)
    except (OSError, ValueError) as error:  # a port in use, an unwritable run dir, a bad keep: say so, not a traceback
        log.error("house %s cannot start: %s", yard, error)
        return 1
    plan = plan_houses(layout, houses)
    status = status_dir(layout)
    status.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = status / f"{yard}.json"
    house.scheduler.spawn(_status_writer(house, path, yard, _find(plan, yard).manor), name="status")
    log.info("house %s (%s) of estate %s running, pid %d", yard, house.name, layout.estate, os.getpid())
    house.run(handle_signals=True)
    log.info("house %s stopped (%s)", yard, house.stopped_by.name if house.stopped_by else "flow ended")
    return 0


def launch(layout_path: str | Path, *, houses: int | None = None, out: Any = print) -> int:
    """Run every house of the estate under a supervisor until SIGINT/SIGTERM."""
    from flowcast.house.supervisor import ChildSpec, Supervisor

    layout = load_layout(layout_path)
    plan = plan_houses(layout, houses)
    logs = log_dir(layout)
    logs.mkdir(parents=True, exist_ok=True, mode=0o700)
    status_dir(layout).mkdir(parents=True, exist_ok=True, mode=0o700)
    argv = [sys.executable, "-m", "flowcast.house.worker", str(layout.path)]
    if houses is not None:
        argv += ["--houses", str(houses)]
    children = [ChildSpec(p.yard, [*argv, "--yard", p.yard], logs / f"{p.yard}.log") for p in plan]
    out(
        f"estate {layout.estate}: {len(plan)} houses ({', '.join(p.yard for p in plan)}); "
        f"logs in {logs}, status with 'flowcast status {layout.path}'"
    )
    supervisor = Supervisor(children, status_path=layout.run / "supervisor.json")
    return supervisor.run()
