"""What a running house offers the layers that run inside it.

Behaviours (``io.house``), the flow builder, the routing wiring and the
export recorder all reach the house they run in.  They used to take it as
``Any`` and set attributes on it (``house.router = router``), so nothing
said what a house offers or which names a layer may add.  This Protocol
says it, for every layer at once: it sits in the store layer because that
is the lowest one that can name both a store and a scheduler, so every
user may import it (docs/architecture.md) and the house layer, which
implements it, stays above them all.

Service slots (``router``, ``cast``, ``causal``) belong to layers above
this one, so they are typed ``Any`` here and each owning layer types what
it puts there.  A slot is None until its layer wires the house; a new
service gets a slot declared here and on ``flowcast.house.House``, never
an attribute set from outside.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from flowcast.runtime.clock import Clock
from flowcast.runtime.scheduler import Scheduler
from flowcast.store.store import Store

__all__ = ["HouseLike", "SERVICE_SLOTS"]

#: The named service slots a house has, each None until its layer wires it.
SERVICE_SLOTS = ("router", "cast", "causal")


@runtime_checkable
class HouseLike(Protocol):
    """A house as the layers inside it see it: one store, one scheduler, one clock."""

    #: The house's Router (flowcast.routing), once wired; None on its own.
    router: Any
    #: The CAST service (flowcast.cast), once wired.
    cast: Any
    #: The causal mailbox service (flowcast.causal), once wired.
    causal: Any

    @property
    def name(self) -> str:
        """The flow house's name."""
        ...

    @property
    def store(self) -> Store:
        """The house's shares."""
        ...

    @property
    def scheduler(self) -> Scheduler:
        """Where stacks and behaviours run micro-threads and timers."""
        ...

    @property
    def clock(self) -> Clock:
        """The scheduler's clock: the only time a simulated run may read."""
        ...

    @property
    def stamp(self) -> Callable[[], float]:
        """The house's tick time, what its shares are stamped with."""
        ...

    def on_close(self, closer: Callable[[], None]) -> None:
        """Run ``closer`` when the house stops (newest first)."""
        ...
