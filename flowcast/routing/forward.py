"""The manor's forwards: shares whose arrivals name no yard and go on to another house of the estate.

Why a book of its own: remotes address an estate's services at the manor
(``share@.estate``), but a service (a CAST cache in a worker house) may
live elsewhere.  The manor admits such an arrival by its policy as usual,
then passes it down the lane with the yard filled in; the book says where,
and refuses at set-up what could never work (a bad name, the manor itself).
"""

from __future__ import annotations

from flowcast.routing.route import Route

__all__ = ["Forwards"]


class Forwards:
    """Share -> yard, for the manor ``own``."""

    __slots__ = ("own", "_to")

    def __init__(self, own: str) -> None:
        self.own = own
        self._to: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self._to)

    def get(self, share: str) -> str | None:
        return self._to.get(share)

    def add(self, share: str, yard: str) -> None:
        Route.make(share, yard)  # both checked as route names
        if not yard or yard == self.own:
            raise ValueError(f"forward {share!r} to another yard of this estate, not {yard!r}")
        self._to[share] = yard

    def remove(self, share: str) -> bool:
        return self._to.pop(share, None) is not None

    def copy(self) -> dict[str, str]:
        return dict(self._to)
