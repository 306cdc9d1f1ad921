"""Presence: what a stack knows about each remote's reachability.

RAET's four states, in the order a remote normally passes through them:
``joined`` (its keys are accepted, no session yet), ``allowed`` (a session
exists), ``alive`` (authenticated traffic heard within the dead-after
interval) and ``dead`` (a session exists but nothing authenticated has been
heard for that long).  Changes are reported to listeners so a house can
mirror them into a share.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

__all__ = ["Presence", "PresenceListener"]


class Presence(str, enum.Enum):
    UNKNOWN = "unknown"
    JOINED = "joined"
    ALLOWED = "allowed"
    ALIVE = "alive"
    DEAD = "dead"


#: ``listener(remote_name, old, new)``
PresenceListener = Callable[[str, Presence, Presence], None]
