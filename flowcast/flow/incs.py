"""``inc``: add to share fields the way Ioflo does, failures included.

Ioflo creates a field that nothing initialised as None, and its ``inc``
then fails (None + 1 is a TypeError): the act does nothing, the field stays
None and the share is not stamped, so ``is updated`` does not fire.
flowcast once started such a field at 0, so the same script counted in
flowcast and stood still in Ioflo.  A failed ``inc`` is not a crash of the
house either: it is counted on the act and reported once in the log, so a
flow that forgot its ``init`` is visible without flooding anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flowcast.flow.spec import Where

__all__ = ["inc_direct", "inc_indirect"]

log = logging.getLogger("flowcast.flow")


def _failed(act: Any, share: Any, error: TypeError, where: Where | None) -> None:
    act.failures += 1
    if act.failures == 1:
        place = f"{where}: " if where is not None else ""
        log.warning("%sinc %s failed (%s); it keeps its value, as in Ioflo -- init the share first",
                    place, share.name, error)


def inc_direct(share: Any, data: dict[str, Any], where: Where | None) -> Callable[[], None]:
    """``inc DST with DATA``: one update of every field, or none at all."""
    items = tuple(data.items())
    get = share.get

    def run() -> None:
        try:
            new = {field: get(field) + amount for field, amount in items}
        except TypeError as error:
            _failed(run, share, error, where)
            return
        share.update(new)

    run.failures = 0  # type: ignore[attr-defined]
    return run


def inc_indirect(dst: Any, src: Any, pairs: list[tuple[str, str]], where: Where | None) -> Callable[[], None]:
    """``inc DST from SRC``: ``pairs`` are (destination field, source field)."""
    got, give = dst.get, src.get

    def run() -> None:
        try:
            new = {d: got(d) + give(s) for d, s in pairs}
        except TypeError as error:
            _failed(run, dst, error, where)
            return
        dst.update(new)

    run.failures = 0  # type: ignore[attr-defined]
    return run
