"""What bench/causal.py and its fetch figure (bench/_causalfetch.py) share: the topic, keys, policy and messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowcast.causal.message import TopicMsg, make

TOPIC = "log"
CONTENT = 100
PUBLISHERS = 8


def signing_key(name: str) -> Any:
    """A fixed signing key per name, so runs repeat."""
    from nacl.signing import SigningKey

    return SigningKey(name.encode().ljust(32, b"k")[:32])


def peer_rules(peers: tuple[str, ...]) -> list[dict[str, str]]:
    """The policy of tests/causal/kit.py: peers may fetch (``causal``) and use CAST."""
    out = []
    for peer in peers:
        out += [{"allow": "write", "estate": peer, "share": "cast.*"},
                {"allow": "subscribe", "estate": peer, "share": "cast"},
                {"allow": "causal", "estate": peer, "share": "causal"}]
    return out


def topic_config(owner: bytes, publishers: list[bytes]) -> Any:
    from flowcast.causal.config import TopicConfig

    return TopicConfig.of(TOPIC, owner, publishers)


def signed_chains(count: int, keys: list[Any], *, first_deps: Callable[[int], list[Any]] = lambda p: []) -> list[TopicMsg]:
    """``count`` messages, round robin over ``keys``, each naming its publisher's previous one
    (a publisher's first names ``first_deps(publisher index)``): one chain per key."""
    out: list[TopicMsg] = []
    tips: dict[int, Any] = {}
    content = bytes(range(CONTENT))
    for i in range(count):
        p = i % len(keys)
        deps = [tips[p]] if p in tips else first_deps(p)
        out.append(make(keys[p], TOPIC, content, deps=deps))
        tips[p] = out[-1].id
    return out
