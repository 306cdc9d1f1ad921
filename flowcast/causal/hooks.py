"""The causal layer's hook points, for the export recorder, tests and tools.

Listeners are called with keyword-free positional arguments, as listed;
``sub`` is a :class:`flowcast.causal.service.Subscription` (``topic``,
``into``, ``name``), ``entry`` a :class:`flowcast.causal.mailbox.Buffered`,
``ready`` a :class:`flowcast.causal.mailbox.Ready` (``lag`` = seconds
buffered), hashes and publishers are raw bytes (print them with ``.hex()``).
"""

from __future__ import annotations

__all__ = ["HOOKS"]

HOOKS = (
    "stored",        # (topic, msg: TopicMsg, seq: int, source: str)  accepted by the relay and durable; source '' = published here
    "dropped",       # (topic: str | None, reason: str, source: str, publisher: bytes | None)  predicate 1 or a duplicate
    "buffered",      # (sub, entry)
    "delivered",     # (sub, ready)
    "rejected",      # (sub | None, topic, hash, publisher, reason)  predicate 2, a bad dep, or what depends on one
    "abandoned",     # (sub, entry, missing: list[bytes])  its epoch closed before its deps came
    "equivocation",  # (topic, publisher, first_hash, second_hash)
    "fetched",       # (topic, hash, source: str, waited: float)  a missing dep arrived by fetch
)
