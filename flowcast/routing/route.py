"""Route: where a flow starts or ends, as ``(share, yard, estate, channel)``.

An empty element means "local at that level": an empty estate is the
sender's own estate, an empty yard is the sender's own house (or, at
another estate, that estate's manor), an empty channel is the default road.
A route is resolved against its sender once, before it leaves the house,
so every router past the first one sees absolute routes.

The text form is ``share@yard.estate/channel`` with empty parts left out
(``pong@.beta`` is the share ``pong`` at beta's manor).  Yard and channel
names cannot contain a dot, so the first dot after ``@`` ends the yard and
estate names (which may contain dots) take the rest.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from flowcast.errors import Error
from flowcast.store.store import valid_share_name

__all__ = ["Route", "RouteError", "valid_yard", "valid_channel", "valid_estate"]

_YARD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}\Z")
_CHANNEL = _YARD
_ESTATE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}\Z")  # the keep's estate names


class RouteError(ValueError, Error):
    """A route (text or wire form) that names something impossible."""


def valid_yard(name: str) -> bool:
    return isinstance(name, str) and _YARD.match(name) is not None


valid_channel = valid_yard


def valid_estate(name: str) -> bool:
    return isinstance(name, str) and _ESTATE.match(name) is not None and ".." not in name


def _check(share: str, yard: str, estate: str, channel: str) -> None:
    if share and not valid_share_name(share):  # callers strip one leading dot, never more
        raise RouteError(f"bad share name in route: {share[:80]!r}")
    if yard and not valid_yard(yard):
        raise RouteError(f"bad yard name in route: {yard[:80]!r} (letters, digits, '_', '-'; no dots)")
    if estate and not valid_estate(estate):
        raise RouteError(f"bad estate name in route: {estate[:80]!r}")
    if channel and not valid_channel(channel):
        raise RouteError(f"bad channel name in route: {channel[:80]!r} (letters, digits, '_', '-')")


class Route(NamedTuple):
    """``(share, yard, estate, channel)``; build with :meth:`make`, :meth:`parse` or :meth:`from_wire`."""

    share: str = ""
    yard: str = ""
    estate: str = ""
    channel: str = ""

    @classmethod
    def make(cls, share: str = "", yard: str = "", estate: str = "", channel: str = "") -> "Route":
        """A validated route (the plain constructor trusts its caller)."""
        if share.startswith("."):
            share = share[1:]
        _check(share, yard, estate, channel)
        return cls(share, yard, estate, channel)

    @classmethod
    def parse(cls, text: str) -> "Route":
        """Read ``share@yard.estate/channel``; every part may be empty."""
        if not isinstance(text, str):
            raise RouteError(f"a route is text, not {type(text).__name__}")
        if len(text) > 512:
            raise RouteError(f"route is {len(text)} characters long (at most 512)")
        rest, slash, channel = text.partition("/")
        if slash and "/" in channel:
            raise RouteError(f"route {text!r} has more than one '/'")
        share, at, place = rest.partition("@")
        if at and "@" in place:
            raise RouteError(f"route {text!r} has more than one '@'")
        yard, dot, estate = place.partition(".")
        if dot and not estate:
            raise RouteError(f"route {text!r} has a '.' but no estate after it")
        try:
            return cls.make(share.strip(), yard, estate, channel)
        except RouteError as error:
            raise RouteError(f"route {text!r}: {error}") from None

    @classmethod
    def from_wire(cls, value: Any) -> "Route":
        """A route from a message: a list of four strings, validated."""
        if not isinstance(value, (list, tuple)) or len(value) != 4 or not all(type(part) is str for part in value):
            raise RouteError("a route on the wire is a list of four strings")
        share, yard, estate, channel = value
        if share.startswith("."):
            share = share[1:]
        _check(share, yard, estate, channel)
        return cls(share, yard, estate, channel)

    def __str__(self) -> str:
        text = self.share
        if self.yard or self.estate:
            text += "@" + self.yard
            if self.estate:
                text += "." + self.estate
        if self.channel:
            text += "/" + self.channel
        return text

    def resolved(self, yard: str, estate: str, channel: str) -> "Route":
        """This route made absolute for a sender in ``yard`` of ``estate``.

        A route to another estate keeps an empty yard: there it means that
        estate's manor, which only that estate knows.
        """
        to_estate = self.estate or estate
        to_yard = self.yard or (yard if to_estate == estate else "")
        return Route(self.share, to_yard, to_estate, self.channel or channel)
