"""Refusing a routed message: counted, noted, heard, and answered to its source when it has one.

Apart from the router's dispatch because every part that gives up on a
message (the dispatch, a hold that timed out, a batch, a stack's failure)
ends here, and what an answer may say and to whom is one rule: never to a
source that cannot be believed (``SILENT``), never an error about an error,
and not again to a source told the same a moment ago (``Refused.quiet``).
"""

from __future__ import annotations

from typing import Any

from flowcast.routing.batch import parcel_count
from flowcast.routing.handlers import Refused
from flowcast.routing.pair import Pair
from flowcast.routing.parcel import open_header
from flowcast.routing.route import Route

__all__ = ["SILENT", "refuse", "refuse_raw"]

#: Never answered: the source they name is not who sent them.
SILENT = ("spoofed", "malformed")


def refuse_raw(router: Any, parcel: Any, refused: Refused, channel: str = "") -> None:
    """A refusal of a message as it arrived: answer only if its source can be read."""
    if refused.count is None and refused.counter != "malformed":
        refused.count = parcel_count(parcel)
    try:
        src, dst, tag, _stamp, _offset = open_header(parcel)
        pair = Pair(Route.from_wire(src), Route.from_wire(dst))
        if channel and pair.src.channel != channel:
            pair = Pair(pair.src._replace(channel=channel), pair.dst)
        tag = tag if tag.__class__ is str and len(tag) <= 64 else ""
    except Exception:  # noqa: BLE001 - malformed beyond an answer
        router.counts[refused.counter] += 1
        router.denials.note(refused.counter, refused.reason, None, None, "")
        return
    refuse(router, pair, tag, refused)


def refuse(router: Any, pair: Pair, tag: str, refused: Refused) -> None:
    """Count, note and hear a refusal of ``pair``'s message of ``tag``, and answer its source."""
    src, dst = pair.src, pair.dst
    heard = router.hooks.refused
    count = refused.count or 1
    if heard is not None and not refused.heard:
        for _ in range(count):  # each message of a batch, as each would be alone
            heard(pair, tag, refused)
    router.counts[refused.counter] += count
    router.denials.note(refused.counter, f"{refused.reason}; {refused.hint}" if refused.hint else refused.reason, src, dst, tag)
    if tag == "error" or not src.share or refused.counter in SILENT:
        router.counts["errors_dropped"] += 1
        return
    if refused.quiet:
        router.counts["errors_withheld"] += count
        return
    here = Route(dst.share, router.yard, router.estate, src.channel)
    report = {"reason": refused.reason, "tag": tag, "dst": str(dst), "kind": refused.counter}
    if count > 1:  # a batch, or part of one (flowcast.routing.batch)
        report["count"] = count
    router.counts["errors_sent"] += 1
    router._send_pair(router._pair(here, src), "error", report, True, None)
