"""An estate on one host: its houses as processes, wired by its layout.

``launch`` is what ``flowcast run houses/ESTATE.yaml`` does: read the
layout once, plan one house per core, draw a fresh lane secret, then hand
each house its plan and its lane keys (handoff.py) through a Supervisor
that runs it as ``python -m flowcast.cli.worker LAYOUT --yard YARD``.
``open_house`` is what that worker does: build the house's flow, give it a
router, join the estate's lane and -- in the manor -- open the roads and
join the remotes the layout names.  Every house writes a status file once
a second, which ``flowcast status`` reads; nothing is shared between
houses but the lane.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable

from flowcast.cast import CacheError
from flowcast.errors import damaged_cause
from flowcast.house.childproc import EXIT_HOLD
from flowcast.house.castwire import wire_cast
from flowcast.house.layoutcausal import wire_causal
from flowcast.house.layoutshares import wire_shares
from flowcast.house.handoff import Handoff, not_dumpable
from flowcast.house.house import DEFAULT_PERIOD, House, load_house
from flowcast.house.joining import JoinTries, keep_joined
from flowcast.house.layout import EstateLayout, HousePlan, load_layout, plan_houses
from flowcast.routing.wiring import wire_lane, wire_road, wire_router
from flowcast.runtime import sleep, wall_now
from flowcast.runtime.spin import budget_for
from flowcast.store import HouseLike
from flowcast.transport.lanekeys import LaneKeys, new_secret

__all__ = ["launch", "open_house", "run_house", "status_dir", "lane_dir", "STATUS_PERIOD"]

log = logging.getLogger("flowcast.estate")
STATUS_PERIOD = 1.0


def lane_dir(layout: EstateLayout) -> Path:
    return layout.run / "lane"


def status_dir(layout: EstateLayout) -> Path:
    return layout.run / "status"


def log_dir(layout: EstateLayout) -> Path:
    return layout.run / "logs"


def last_words_path(layout: EstateLayout, yard: str) -> Path:
    """Where house ``yard`` leaves why it exited with an error, for its supervisor (not ``.json``: no status file)."""
    return status_dir(layout) / f"{yard}.error"


def _find(plan: list[HousePlan], yard: str) -> HousePlan:
    for entry in plan:
        if entry.yard == yard:
            return entry
    raise ValueError(f"yard {yard!r} is not in this estate's plan (yards: {', '.join(p.yard for p in plan)})")


def open_house(
    layout: EstateLayout,
    yard: str,
    *,
    houses: int | None = None,
    period: float = DEFAULT_PERIOD,
    freeze: bool = False,
    keys: LaneKeys | None = None,
) -> House:
    """Build yard ``yard``'s house from ``layout`` and wire it; the caller runs it.

    ``keys`` are the yard's lane credentials from its supervisor.  Without
    them the house draws a secret of its own: its lane still authenticates,
    it just hears no other yard (a house on its own, in a test).  If wiring
    fails or is interrupted, what was opened is closed again.
    """
    plan = plan_houses(layout, houses)
    mine = _find(plan, yard)
    if keys is None:
        keys = LaneKeys.derive(new_secret(), yard, [p.yard for p in plan])
    house = load_house(mine.entry.flow, mine.entry.house, freeze=freeze, period=period)
    house.scheduler.spin.budget = budget_for(len(plan))  # off where more houses than cores share the host
    try:
        _wire(house, layout, plan, mine, keys)
    except BaseException:
        house.close()
        raise
    return house


def _wire(house: House, layout: EstateLayout, plan: list[HousePlan], mine: HousePlan, keys: LaneKeys) -> None:
    yard = mine.yard
    manor = plan[0].yard
    channels = list(layout.roads)
    if layout.causal is not None:  # declares the 'causal' permission (fetches) before the policy granting it is read
        import flowcast.causal.sync  # noqa: F401
    wire_router(
        house,
        estate=layout.estate,
        yard=yard,
        manor=manor,
        policy=[_rule(rule) for rule in layout.policy],
        default_channel=channels[0] if channels else "main",
    )
    if layout.shares is not None:
        wire_shares(house, layout.shares)
    wire_lane(house, lane_dir(layout), [p.yard for p in plan], keys=keys)
    if layout.cast is not None:
        wire_cast(house, layout.cast, layout.estate, yard)
        if layout.causal is not None and yard == layout.causal.house:  # the relay lives with the CAST cache
            wire_causal(house, layout.causal, layout.cast)
    if mine.manor:
        for road in layout.roads.values():
            try:
                stack = wire_road(
                    house, road.channel, keep=layout.keep, host=road.host, port=road.port,
                    acceptance=road.acceptance, role=layout.role, options=road.stack_options(),
                )
            except OSError as error:
                raise _bind_error(road.channel, road.host, road.port, error) from error
            log.info("road %s on %s:%d", road.channel, *stack.address[:2])
            for remote in road.remotes:
                tries = house.joining.setdefault(road.channel, {})[remote.estate] = JoinTries((remote.host, remote.port))
                house.scheduler.spawn(
                    keep_joined(stack, remote.estate, tries, house.scheduler), name=f"join:{road.channel}:{remote.estate}"
                )


def _bind_error(channel: str, host: str, port: int, error: OSError) -> OSError:
    """A road's bind failure that names the road and its port: ``[Errno 98] Address already in use`` alone does not say which."""
    if error.errno == errno.EADDRINUSE:
        text = f"road {channel}: UDP port {port} on {host} is taken by another process ({error.strerror})"
    else:
        text = f"road {channel}: cannot open UDP port {port} on {host}: {error.strerror or error}"
    named = OSError(text)
    named.errno = error.errno
    return named


def _rule(rule: Any) -> dict[str, str]:
    out = {rule.effect: rule.access}
    for name in ("estate", "role", "share", "tag", "channel"):
        out[name] = getattr(rule, name)
    return out


def _status_writer(house: HouseLike, path: Path, yard: str, manor: bool, wall_started: float | None = None):  # type: ignore[no-untyped-def]
    """A micro-thread: the house's status (and message rates) into ``path`` each period.

    Rates are measured on the house's clock, like everything the house
    does; only the stamps a person reads (``started``, ``updated``, each
    denial's ``at``) are wall time, converted here and nowhere sooner.
    """
    clock = house.scheduler.clock
    wall_started = wall_now() if wall_started is None else wall_started
    previous: dict[str, int] | None = None  # no rates before a second look
    previous_at = clock.now()
    while True:
        now = clock.now()
        status = house_status(house, yard, manor, wall_started)
        counts = status.get("counts", {})
        span = max(now - previous_at, 1e-6)
        status["rates"] = {
            key: 0.0 if previous is None else (value - previous.get(key, 0)) / span for key, value in counts.items()
        }
        previous, previous_at = dict(counts), now
        write_status(path, status)
        yield sleep(STATUS_PERIOD)


def house_status(house: HouseLike, yard: str, manor: bool, wall_started: float) -> dict[str, Any]:
    """One snapshot of the house for its status file (without rates: they need two looks)."""
    clock = house.scheduler.clock
    now = clock.now()
    router = house.router
    status = router.status() if router is not None else {}
    wall = wall_now()
    if "denials" in status:
        status["denials"] = [_wall_denial(entry, wall - now) for entry in status["denials"]]
    status.update(
        {"pid": os.getpid(), "house": house.name, "started": wall_started, "updated": wall, "manor": manor, "yard": yard}
    )
    if router is not None:
        status["ports"] = {ch: list(road.address[:2]) for ch, road in router.roads.items()}
    joining = getattr(house, "joining", None)
    if joining:  # the remotes the layout names, each with where it is tried and the last answer
        status["joining"] = {ch: {estate: tries.as_dict() for estate, tries in remotes.items()} for ch, remotes in joining.items()}
    cast = getattr(house, "cast", None)  # a house-like without the slot (a test's stand-in) has none
    if cast is not None:  # leases held and subscriptions, for 'flowcast cast ls' (the cache itself it reads from disk)
        status["cast"] = cast.status()
    causal = getattr(house, "causal", None)
    if causal is not None:  # counts, buffered and missing per topic, for 'flowcast causal status'
        status["causal"] = causal.status()
    return status


def write_status(path: Path, status: dict[str, Any]) -> None:
    """Replace the status file whole (readers never see half a file); a failure is logged, never raised.

    Not fsynced: a status is worth nothing after a crash, and a house must
    not stall on the disk once a second.
    """
    try:
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_bytes(json.dumps(status, default=str).encode())
        os.replace(temporary, path)
    except (OSError, TypeError, ValueError) as error:
        log.warning("status file %s: %s", path, error)


def _final_status(house: House, path: Path, yard: str, manor: bool, wall_started: float) -> None:
    """The status a stopped house leaves: its last counts and how its stop went (``stop``: flowcast.house.drain)."""
    try:
        status = house_status(house, yard, manor, wall_started)
    except Exception:  # noqa: BLE001 - a closed part that cannot say its status: the stop section still goes out
        log.exception("house %s: status after the stop", yard)
        status = {"pid": os.getpid(), "house": house.name, "yard": yard, "manor": manor, "updated": wall_now()}
    status["state"] = "stopped"
    status["stop"] = house.drained.as_dict()
    write_status(path, status)


def _wall_denial(entry: dict[str, Any], wall_offset: float) -> dict[str, Any]:
    """A router denial with its ``at`` (house clock seconds) as wall time, for ``flowcast status``."""
    at = entry.get("at")
    if isinstance(at, (int, float)):
        return {**entry, "at": at + wall_offset}
    return entry


class StartInterrupted(BaseException):
    """SIGINT/SIGTERM while a house was still starting (a BaseException: no ``except Exception`` keeps it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signal.Signals(signum)


def _interrupt_start(signum: int, _stack: object) -> None:
    raise StartInterrupted(signum)


def stop_on_signals_while_starting() -> dict[int, Any]:
    """Until the house runs, SIGINT/SIGTERM abort its start with :class:`StartInterrupted`.

    Without this a stop during start-up (a flow whose setup blocks, a slow
    keep) killed the process by the default action: no closers, socket
    files left behind.  Raising unwinds whatever is starting, and
    ``open_house`` / ``House`` close what was opened.  ``House.run``
    installs its own handlers once the house runs.
    """
    return {s: signal.signal(s, _interrupt_start) for s in (signal.SIGINT, signal.SIGTERM)}


def run_house(handoff: Handoff, *, fatal: Callable[[str], None] | None = None,
              record: Callable[..., Any] | None = None) -> int:
    """Run one house of an estate, as its supervisor handed it over, until SIGINT/SIGTERM.

    When it cannot start (returns 1) it logs why and also passes that text
    to ``fatal``: the worker leaves it for the supervisor, whose console and
    status then say why the house is down (childproc.exit_reason).  A store
    file that is damaged (an inbox, the cache, the causal ledger) returns
    ``EXIT_HOLD`` (3) with one line naming the file: the file was left as it
    was, and no restart can change that, so the supervisor holds the house.
    """

    def cannot_start(text: str, code: int = 1) -> int:
        log.error("%s", text)
        if fatal is not None:
            fatal(text)
        return code

    yard = handoff.yard
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {yard} %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    stop_on_signals_while_starting()
    house: House | None = None
    recorder: Any = None
    try:
        layout = load_layout(handoff.path, data=handoff.layout_text.encode())
        plan = plan_houses(layout, handoff.houses)
        if tuple(p.yard for p in plan) != handoff.yards:  # the same text and count plan the same yards
            return cannot_start(f"house {yard} cannot start: the layout plans yards {[p.yard for p in plan]}, the supervisor {list(handoff.yards)}")
        try:
            house = open_house(layout, yard, houses=handoff.houses, freeze=True, keys=handoff.keys, period=handoff.period)
        except Exception as error:
            damaged = damaged_cause(error)
            if damaged is not None:  # however deep it was opened: one line naming the file, no traceback
                return cannot_start(f"house {yard} cannot start: {damaged}", EXIT_HOLD)
            if isinstance(error, (OSError, ValueError, CacheError)):  # a port in use, a bad keep: say so, not a traceback
                return cannot_start(f"house {yard} cannot start: {error}")
            raise
        if handoff.export is not None:
            if record is None:  # the export layer sits above this one: the process entry point hands it in
                house.close()
                return cannot_start(f"house {yard} cannot export: started without a recorder (run it with flowcast.cli.worker)")
            try:
                recorder = record(house, handoff.export, layout.estate, yard)
            except (OSError, ValueError) as error:  # an unwritable directory, a journal another writer holds
                house.close()
                return cannot_start(f"house {yard} cannot export to {handoff.export}: {error}")
            log.info("house %s records its events under %s", yard, handoff.export)
        status = status_dir(layout)
        status.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = status / f"{yard}.json"
        mine = _find(plan, yard)
        started = wall_now()
        house.scheduler.spawn(_status_writer(house, path, yard, mine.manor, started), name="status")
        log.info("house %s (%s) of estate %s running, pid %d", yard, house.name, layout.estate, os.getpid())
        house.run(handle_signals=True, drain=layout.drain_of(mine.entry))
        if house.drained is not None:  # the status file says how the stop went, and what it did not deliver
            _final_status(house, path, yard, mine.manor, started)
    except StartInterrupted as stop:
        if house is not None:  # between open_house and run: what open_house opened is the house's to close
            house.close()
        log.info("house %s stopped while starting (%s)", yard, stop.signum.name)
        return 0
    except BaseException:
        if house is not None:  # e.g. an unwritable status dir: still remove the sockets (close runs each closer once)
            house.close()
        raise
    finally:
        if recorder is not None:  # after the house's closers: what its stacks said while closing is in
            # A second SIGTERM now would raise StartInterrupted half-way through publishing (the
            # start-up handlers are back): publishing takes milliseconds, let it finish.
            for number in (signal.SIGINT, signal.SIGTERM):
                signal.signal(number, signal.SIG_IGN)
            published = recorder.close()
            log.info("house %s exported %d segment(s) to %s", yard, len(published), handoff.export)
    log.info("house %s stopped (%s)", yard, house.stopped_by.name if house.stopped_by else "flow ended")
    return 0


def launch(layout_path: str | Path, *, houses: int | None = None, export: str | Path | None = None,
           period: float | None = None, out: Any = print) -> int:
    """Run every house of the estate under a supervisor until SIGINT/SIGTERM.

    ``export`` (``flowcast run LAYOUT --export DIR``) has every house record
    its events under that directory; it overrides the layout's ``export:``.

    Refuses (1) when the estate's run folder is already locked by a live
    supervisor, naming its pid; returns the supervisor's code otherwise
    (3, ``EXIT_ALL_HELD``, when every house failed too often to go on).
    """
    from flowcast.house.layout import MAX_FILE_BYTES
    from flowcast.house.supervisor import AlreadyRunning, take_run_lock

    path = Path(layout_path)
    try:
        with path.open("rb") as handle:
            text = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        load_layout(path)  # raises the LayoutError that says why it cannot be read
        raise
    layout = load_layout(path, data=text)  # read once: this text is what every house gets
    events = Path(export).absolute() if export is not None else layout.export
    ticks = period if period is not None else layout.period if layout.period is not None else DEFAULT_PERIOD
    total = houses if houses is not None else (os.cpu_count() or 1)
    plan = plan_houses(layout, total)
    try:
        lock = take_run_lock(layout.run / "supervisor.lock")  # before anything in the run folder is touched
    except AlreadyRunning as running:
        print(f"flowcast run: estate {layout.estate} is {running}; stop it first", file=sys.stderr)
        return 1
    try:
        if events is not None:  # said once here, not by every house in its log
            try:
                events.mkdir(parents=True, exist_ok=True)
                if not os.access(events, os.W_OK | os.X_OK):
                    raise PermissionError(errno.EACCES, "not writable")
            except OSError as error:
                print(f"flowcast run: cannot export to {events}: {error.strerror or error}", file=sys.stderr)
                return 2
        return _supervise(layout, text, plan, total, out, events, ticks)
    finally:
        os.close(lock)  # the lock goes only now, after the last house was reaped


#: The order an estate's houses stop in (ChildSpec.stop_stage): workers, then the house holding
#: the CAST cache (and causal relay) when that is not the manor, then the manor.
STAGE_WORKER, STAGE_CACHE, STAGE_MANOR = 0, 1, 2


def stop_stage(layout: EstateLayout, house: HousePlan) -> int:
    """When ``house`` stops, relative to the others: after every house that may be sending to it.

    A worker reaches other estates only through the manor (its roads) and
    publishes through the cache's house, over the lane; what it has in
    flight at a stop can only be acknowledged while those still run.  So
    workers drain first, then the cache's house (its publishes and
    answers go through the manor), then the manor.  Traffic the other
    way -- the manor passing a road's message to a worker already gone --
    is what the manor's own drain reports.
    """
    if house.manor:
        return STAGE_MANOR
    cast = layout.cast
    if cast is not None and house.yard == cast.house:  # the yard wire_cast opens the cache in
        return STAGE_CACHE
    return STAGE_WORKER


def _supervise(layout: EstateLayout, text: bytes, plan: list[HousePlan], total: int, out: Any, events: Path | None = None,
               period: float = DEFAULT_PERIOD) -> int:
    from flowcast.house.supervisor import ChildSpec, Supervisor

    yards = tuple(p.yard for p in plan)
    logs = log_dir(layout)
    logs.mkdir(parents=True, exist_ok=True, mode=0o700)
    status_dir(layout).mkdir(parents=True, exist_ok=True, mode=0o700)
    # One secret per estate run, never written anywhere: each house gets the
    # keys of its own pairs, the same ones at every restart.  This process
    # keeps every hand-off, so it closes its memory to the user's others too.
    not_dumpable()
    secret = new_secret()
    argv = [sys.executable, "-m", "flowcast.cli.worker", str(layout.path)]
    children = [
        ChildSpec(
            p.yard,
            [*argv, "--yard", p.yard, "--last-words", str(last_words_path(layout, p.yard))],
            logs / f"{p.yard}.log",
            stdin=Handoff(
                p.yard, str(layout.path), text.decode(), total, yards, LaneKeys.derive(secret, p.yard, yards),
                None if events is None else str(events), period,
            ).encode(),
            last_words=last_words_path(layout, p.yard),
            stop_stage=stop_stage(layout, p),
            drain=layout.drain_of(p.entry),
            hold_on=frozenset({EXIT_HOLD}),  # a damaged store file: held at once, it stays damaged
        )
        for p in plan
    ]
    del secret
    out(
        f"estate {layout.estate}: {len(plan)} house{'' if len(plan) == 1 else 's'} ({', '.join(p.yard for p in plan)}); "
        f"logs in {logs}, status with 'flowcast status {layout.path}'"
        + (f"; events recorded under {events}" if events is not None else "")
    )
    supervisor = Supervisor(children, status_path=layout.run / "supervisor.json")
    return supervisor.run()
