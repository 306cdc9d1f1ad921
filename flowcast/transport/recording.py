"""A stack's message events, recorded by listening on its hooks.

What a sender's stack records of a message: ``sent`` when it enters a
link (flowcast.transport.stack.LinkEvents does that and everything a
link sees), then ``acknowledged`` with its latency, or ``denied`` with
the reason; a road also records its remotes' presence.  All of it as
listeners (flowcast.transport.hooks), installed by ``Stack.set_events`` and
removed by ``set_events(None)``: a stack that records nothing has nothing
installed and pays nothing.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["MessageRecorder"]


class MessageRecorder:
    """Listeners that record one stack's messages into ``sink`` (an EventSink)."""

    def __init__(self, stack: Any, sink: Any) -> None:
        self.stack = stack
        self.sink = sink
        self._unnamed = itertools.count(1)  # names of messages no link numbered: a seed decides them, not id()
        self._installed = [("submitted", self._guard(self.submitted)), ("done", self._guard(self.done))]
        if "presence" in stack.hooks.names:
            self._installed.append(("presence", self._guard(self.presence)))
        for name, listener in self._installed:
            stack.hooks.add(name, listener)

    def _guard(self, record: Callable[..., None]) -> Callable[..., None]:
        """``record``, stopping all of this recording when it raises (a sink's disk full...).

        A hook removes only the listener that raised: the others would go on
        recording half the story (``submitted`` filling ``_born`` that
        nothing empties any more).  So the whole recorder goes, and says so.
        """

        def listener(*args: Any) -> None:
            try:
                record(*args)
            except Exception:  # noqa: BLE001 - the sink's failure, not the stack's
                logging.getLogger("flowcast.hooks").exception("%s: recording events failed; recording stopped", self.stack.name)
                self.stack.counts["recording_failed"] += 1
                if self.stack._recorder is self:
                    self.stack.set_events(None)
                else:
                    self.detach()

        return listener

    def detach(self) -> None:
        for name, listener in self._installed:
            self.stack.hooks.discard(name, listener)

    def submitted(self, msg: Any, to: str) -> None:
        """``msg`` was accepted: its latency counts from now."""
        if msg.done:  # failed at once (a full backlog): ``done`` recorded it
            return
        stack = self.stack
        stack._born[msg] = [stack.clock.now(), None, None, None]
        if msg.seq >= 0:  # it entered a link (else it waits for a session)
            watch = stack._link_watch(to)
            if watch is not None:
                watch.sent(msg)

    def done(self, msg: Any) -> None:
        """Final state: ``acknowledged`` (latency from first send) or ``denied``.

        A failure is recorded even for a message this recorder did not see
        accepted -- one that failed inside ``send``, or was sent before
        recording began: a loss is a fact wherever it started.
        """
        stack = self.stack
        state = msg.state
        entry = stack._born.pop(msg, None)
        if entry is None:
            if state != "failed":
                return
            entry = [None, None, None, None]
        first, msg_id, src, dst = entry
        if msg_id is None:  # never got into a link: no sequence number, no session
            msg_id = f"{stack.name}:-:{msg.stream}:{next(self._unnamed)}"
            src, dst = stack._route_of(msg)
        if state == "delivered":
            self.sink.message("acknowledged", msg_id, src, dst, len(msg.data), stack.clock.now() - first)
        elif state == "failed":
            self.sink.message("denied", msg_id, src, dst, len(msg.data), detail=msg.reason or "failed")

    def presence(self, name: str, old: Any, new: Any) -> None:
        self.sink.presence(name, new.value)
