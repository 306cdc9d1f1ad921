"""Drain on stop: what a stopping house has in flight is finished, or reported.

Why: a house used to close its stacks the moment it stopped.  Every lane or
road message not yet acknowledged then failed with "stack closed", and the
router's error report for it went into a share nobody would read again, or
down a lane already shut -- so an estate stopped mid-stream lost messages
with no word in any log, status or error share.  DESIGN.md's promise is
"a stop drains or reports"; this module keeps it.

What :class:`Drain` does, from :meth:`flowcast.house.house.House.run`, once
the scheduler returned for a stop (SIGTERM, SIGINT, ``stop()``):

1. The framers stop: the skedder is cancelled, so their exit acts run (and
   may send: what they send is drained like the rest).
2. The scheduler runs on -- stacks, timers, the CAST cache's writer, no
   framer -- until nothing is in flight (:func:`in_flight`: lane and road
   messages not acknowledged, messages held for an estate that has not
   joined, CAST publishes waiting for their answer, causal publishes not
   yet durable) or the drain time passed.  It wakes on each message a
   stack finishes, so a stop with nothing in flight returns at once and one
   whose peers answer returns with their last answer.  A second signal
   cuts the drain short.
3. What is still in flight is refused: held messages now, stack messages
   when the house closes its stacks ("stack closed").  The router answers
   each as it answers any failure -- into ``SOURCE.error`` when the source
   share is in this house -- and the drain hears every refusal made during
   the stop (the router's ``refused`` hook), since a source in another
   house or estate may be gone: each is reported here, locally, in the log
   (a line per route) and in the house status (:meth:`DrainReport.as_dict`,
   the status file's ``stop`` section).  CAST publishes still waiting for
   the cache's answer end refused and are named; causal publishes not seen
   durable are named.
4. Routed messages that landed in a queue share of this house and that no
   flow took before the framers stopped are counted per share: they were
   acknowledged to their sender, and only this report says where they are.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Generator

from flowcast.runtime import Event
from flowcast.store import HouseLike

__all__ = ["Drain", "DrainReport", "in_flight", "RECHECK"]

log = logging.getLogger("flowcast.drain")

#: Seconds between looks at what is in flight besides the stacks' own completions (CAST and causal
#: tickets complete through the cache's writer): a stop's only polling, and only while it drains.
RECHECK = 0.05
#: Routes (and ids) listed in a report; the counts stay exact beyond them.
MAX_LISTED = 100


def in_flight(house: HouseLike) -> dict[str, int]:
    """What ``house`` has started and not finished, by part; parts with nothing are left out."""
    out: dict[str, int] = {}
    router = house.router
    if router is not None:
        if router.lane is not None and not router.lane.closed:
            out["lane"] = router.lane.pending()
        for channel, road in router.roads.items():
            if not road.closed:
                out[f"road {channel}"] = road.pending()
        out["held"] = router.holding
    for part in ("cast", "causal"):
        service = getattr(house, part, None)
        counter = getattr(service, "in_flight", None)
        if counter is not None:
            out[part] = counter()
    return {part: n for part, n in out.items() if n}


@dataclass
class DrainReport:
    """How a stop went: how long it drained, what was in flight, and every message it did not deliver."""

    #: What stopped the house ("SIGTERM"; "stop" for a call of House.stop()).
    by: str
    #: The drain time allowed, in seconds.
    allowed: float
    #: In flight once the framers had stopped.
    at_stop: dict[str, int] = field(default_factory=dict)
    #: In flight when the drain ended (empty: everything finished).
    left: dict[str, int] = field(default_factory=dict)
    #: Seconds the drain took.
    took: float = 0.0
    #: A second signal ended the drain early.
    cut_short: bool = False
    #: (src, dst, tag, kind) -> messages refused during the stop; ``reasons`` says why, per the same key.
    refused: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)
    reasons: dict[tuple[str, str, str, str], str] = field(default_factory=dict)
    #: Error reports that could not be delivered either (their messages are in ``refused``).
    errors_lost: int = 0
    #: CAST publishes (ids) still waiting for the cache's answer, refused at the stop.
    cast_unanswered: list[bytes] = field(default_factory=list)
    #: Causal publishes (hashes) not seen durable; the cache's close may still store them.
    causal_unstored: list[bytes] = field(default_factory=list)
    #: Queue share -> routed messages that landed there and no flow took.
    unconsumed: dict[str, int] = field(default_factory=dict)

    @property
    def drained(self) -> bool:
        """Everything in flight finished within the drain time."""
        return not self.left

    @property
    def undelivered(self) -> int:
        """Routed messages refused during the stop: not delivered, or not known delivered."""
        return sum(self.refused.values())

    @property
    def clean(self) -> bool:
        """Nothing to report: drained, nothing refused, nothing left in a queue."""
        return (self.drained and not self.refused and not self.cast_unanswered and not self.causal_unstored
                and not self.unconsumed)

    def as_dict(self) -> dict[str, Any]:
        """The status file's ``stop`` section (plain JSON)."""
        routes = [
            {"src": src, "dst": dst, "tag": tag, "kind": kind, "count": n, "reason": self.reasons.get((src, dst, tag, kind), "")}
            for (src, dst, tag, kind), n in self.refused.most_common(MAX_LISTED)
        ]
        return {
            "by": self.by,
            "drain": self.allowed,
            "took": round(self.took, 6),
            "drained": self.drained,
            "cut_short": self.cut_short,
            "in_flight": dict(self.at_stop),
            "left": dict(self.left),
            "undelivered": self.undelivered,
            "routes": routes,
            "errors_lost": self.errors_lost,
            "cast_unanswered": [i.hex() for i in self.cast_unanswered[:MAX_LISTED]],
            "cast_unanswered_count": len(self.cast_unanswered),
            "causal_unstored": [h.hex() for h in self.causal_unstored[:MAX_LISTED]],
            "causal_unstored_count": len(self.causal_unstored),
            "unconsumed": dict(self.unconsumed),
        }

    def lines(self, house: str) -> list[str]:
        """The log's account: a summary, then a line per route and per kind of thing left."""
        if self.cut_short:
            how = f"drain cut short by a second signal after {self.took:.3f} s"
        elif self.drained:
            how = f"drained in {self.took:.3f} s"
        else:
            how = f"drain of {self.allowed:g} s ran out with {_parts(self.left)} in flight"
        head = f"house {house} stopped ({self.by}): {how}"
        if self.clean:
            return [head + "; nothing undelivered"]
        out = [head + f"; {self.undelivered} routed message(s) not delivered, reported here"]
        for (src, dst, tag, kind), n in self.refused.most_common(MAX_LISTED):
            out.append(f"  {n} from {src} to {dst} tag {tag}: {kind} ({self.reasons.get((src, dst, tag, kind), '')})")
        if len(self.refused) > MAX_LISTED:
            out.append(f"  ... and {len(self.refused) - MAX_LISTED} more routes (counted above)")
        if self.errors_lost:
            out.append(f"  {self.errors_lost} error report(s) for them could not reach their source either")
        if self.cast_unanswered:
            out.append(f"  {len(self.cast_unanswered)} CAST publish(es) not answered by the cache, refused: "
                       + " ".join(i.hex() for i in self.cast_unanswered[:8]))
        if self.causal_unstored:
            out.append(f"  {len(self.causal_unstored)} causal publish(es) not seen durable: "
                       + " ".join(h.hex()[:16] for h in self.causal_unstored[:8]))
        for share, n in sorted(self.unconsumed.items()):
            out.append(f"  {n} routed message(s) landed in queue share {share} and no flow took them")
        return out


def _parts(counts: dict[str, int]) -> str:
    return ", ".join(f"{part} {n}" for part, n in counts.items())


class Drain:
    """One stop of ``house``: :meth:`run` drains (the house then closes), :meth:`finish` reports."""

    def __init__(self, house: HouseLike, seconds: float, by: str) -> None:
        if not seconds >= 0:
            raise ValueError("the drain time is a number of seconds >= 0")
        self.house = house
        self.seconds = seconds
        self.report = DrainReport(by, seconds)
        self._listening = False
        self._wake = Event()

    def run(self, skedder: Any = None, cut_short: Any = None) -> DrainReport:
        """Stop the framers, run the scheduler until nothing is in flight or the time is up, refuse what is held.

        ``skedder`` is the framers' micro-thread; ``cut_short`` a callable
        saying whether a second signal came (the scheduler then returned).
        """
        house, report = self.house, self.report
        scheduler = house.scheduler
        clock = scheduler.clock
        started = clock.now()
        router = house.router
        if router is not None:
            router.hooks.add("refused", self._heard)
            self._listening = True
        if skedder is not None and not skedder.done:
            scheduler.cancel(skedder)  # its finally aborts every framer: exit acts run now
        report.at_stop = in_flight(house)
        if report.at_stop and self.seconds > 0:
            scheduler.spawn(self._wait(started + self.seconds), name="drain")
            try:
                scheduler.run()
            except Exception:  # noqa: BLE001 - an exit act or a micro-thread failed: still report and close
                log.exception("house %s: failed while draining", getattr(house, "name", "?"))
            report.cut_short = bool(cut_short and cut_short())
        report.took = clock.now() - started
        report.left = in_flight(house)
        if router is not None and router.holding:
            from flowcast.routing.hold import refuse_held

            refuse_held(router, "the house stopped before the estate joined")
        cast = getattr(house, "cast", None)
        if cast is not None and hasattr(cast, "drain_report"):
            report.cast_unanswered = cast.drain_report("the house stopped before the cache answered")
        causal = getattr(house, "causal", None)
        if causal is not None and hasattr(causal, "drain_report"):
            report.causal_unstored = causal.drain_report()
        return report

    def finish(self) -> DrainReport:
        """After the house closed (its stacks failed what they still held): stop listening, log, return the report."""
        house, report = self.house, self.report
        router = house.router
        if router is not None:
            if self._listening:
                router.hooks.remove("refused", self._heard)
                self._listening = False
            report.unconsumed = unconsumed(router)
        name = router.yard if router is not None else getattr(house, "name", "house")
        level = logging.INFO if report.clean else logging.WARNING
        for line in report.lines(name):
            log.log(level, "%s", line)
        return report

    # -- while draining ---------------------------------------------------------

    def _wait(self, deadline: float) -> Generator[Any, Any, None]:
        """Micro-thread: stop the scheduler once nothing is in flight, or at ``deadline``."""
        house = self.house
        scheduler = house.scheduler
        clock = scheduler.clock
        wake = self._wake
        stacks = _stacks(house)
        for stack in stacks:
            stack.hooks.add("done", self._done)
        try:
            while True:
                now = clock.now()
                if now >= deadline or not in_flight(house):
                    break
                wake.clear()
                timer = scheduler.call_at(min(deadline, now + RECHECK), wake.set)
                try:
                    yield wake.wait()
                finally:
                    timer.cancel()
        finally:
            for stack in stacks:
                try:
                    stack.hooks.remove("done", self._done)
                except KeyError:  # removed already (a listener that raised is removed by the hooks)
                    pass
        scheduler.stop()

    def _done(self, _outgoing: Any) -> None:
        self._wake.set()

    def _heard(self, pair: Any, tag: str, refused: Any) -> None:
        """The router refused a message during the stop: counted for the report."""
        if tag == "error":  # a report about a message already counted, which could not go either
            self.report.errors_lost += 1
            return
        key = (str(pair.src), str(pair.dst), tag, refused.kind)
        self.report.refused[key] += 1
        if key not in self.report.reasons:
            self.report.reasons[key] = refused.reason[:200]


def _stacks(house: HouseLike) -> list[Any]:
    router = house.router
    if router is None:
        return []
    stacks = [router.lane] if router.lane is not None else []
    return stacks + list(router.roads.values())


def unconsumed(router: Any) -> dict[str, int]:
    """Queue shares of this house that routed messages landed in and that still hold items.

    Error shares are left out: what is in them is a report already.
    """
    out: dict[str, int] = {}
    for src, dst in router.routes:
        if dst.estate != router.estate or dst.yard not in (router.yard, "" if router.is_manor else router.yard):
            continue
        share = router.store.get(dst.share)
        queue = getattr(share, "queue", None) if share is not None else None
        if queue and not dst.share.endswith(".error"):
            out[dst.share] = len(queue)
    return out
