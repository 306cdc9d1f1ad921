"""The attack classes of issue 25 as bench/hostile.py runs them: what the victim holds, what the attacker
sends, and which of the victim's configured budgets its memory growth is judged against.

Sizes come in two sets: the full run (the issue's figures, scaled to keep
the whole run within a few minutes) and ``--quick`` (a smoke test: every
path runs, the figures mean nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from _hostile_victim import ALLOWANCE, CAUSAL_PER_MESSAGE, ERROR_QUEUE_BYTES, Settings, Shape

MiB = 1 << 20


@dataclass
class Class:
    """One attack class: its victim, its attack, its budget."""

    name: str
    title: str
    #: (quick, keys) -> what the victim holds and which rules it has
    shape: Callable[[bool, dict[str, str]], Shape]
    #: (quick, keys) -> the attack's parameters (bench/_hostile_attacks.py)
    params: Callable[[bool, dict[str, str]], dict[str, Any]]
    #: (settings, shape, params) -> (bytes, what they are): the configured budgets the growth is held to
    budget: Callable[[Settings, Shape, dict[str, Any]], tuple[int, str]]
    attackers: int = 1
    road: dict[str, Any] = field(default_factory=dict)  # the attackers' road options
    pad: Callable[[bool], int] = lambda quick: 0  # bytes the honest reads carry
    join: bool = True  # the attackers join first (the JOIN flood's addresses never do)
    amplification: bool = False


def _mib(n: int) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n >> 10} KiB"


def _plus_allowance(n: int, what: str) -> tuple[int, str]:
    return n + ALLOWANCE, f"{what} + allowance {_mib(ALLOWANCE)}"


def _road(settings: Settings, _: Shape, __: dict[str, Any]) -> tuple[int, str]:
    return _plus_allowance(settings.hold_budget, f"hold_budget {_mib(settings.hold_budget)}")


def _mallory(*rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"estate": "mallory*", **rule} for rule in rules]


CAST_RULES = _mallory({"allow": "subscribe", "share": "cast"})


def _windows(settings: Settings, _: Shape, params: dict[str, Any]) -> tuple[int, str]:
    subs = int(params["subs"])
    return _plus_allowance(settings.window_bytes * subs, f"window_bytes {_mib(settings.window_bytes)} x {subs} subscriptions")


def _subs(quick: bool) -> int:
    return 8 if quick else 64


CLASSES: list[Class] = [
    Class(
        "big", "big messages from an estate with no rules",
        shape=lambda quick, keys: Shape(),
        params=lambda quick, keys: {"size": (256 << 10) if quick else 8 * MiB, "every": 0.5 if quick else 1.0},
        budget=lambda s, shape, params: _plus_allowance(s.max_message + s.hold_budget,
                                                f"max_message {_mib(s.max_message)} + hold_budget {_mib(s.hold_budget)}"),
    ),
    Class(
        "rewind", "CAST rewind storm (a new ask per subscription, twice a second)",
        shape=lambda quick, keys: Shape(cast=True, cached=200 if quick else 2000, extra_policy=CAST_RULES),
        params=lambda quick, keys: {"subs": _subs(quick), "hz": 2.0},
        budget=_windows,
    ),
    Class(
        "zerowindow", "CAST rewind storm from an estate whose ACKs advertise a zero window",
        shape=lambda quick, keys: Shape(cast=True, cached=200 if quick else 2000, extra_policy=CAST_RULES),
        params=lambda quick, keys: {"subs": _subs(quick), "hz": 2.0},
        budget=_windows,
        road={"receive_window": 0},
    ),
    Class(
        "wide", "wide subscriptions, acknowledged at once, beside the victim's live stream",
        shape=lambda quick, keys: Shape(cast=True, stream_rate=100 if quick else 1000, extra_policy=CAST_RULES),
        params=lambda quick, keys: {"subs": 4 if quick else 64},
        budget=_windows,
    ),
    Class(
        "queues", "error reports into SHARE.error, and a send queue to a peer that stopped reading",
        shape=lambda quick, keys: Shape(feed_rate=20 if quick else 200, feed_size=16 << 10),
        params=lambda quick, keys: {"rate": 100 if quick else 500},
        budget=lambda s, shape, params: _plus_allowance(ERROR_QUEUE_BYTES + s.backlog_bytes,
                                                f"error queue {_mib(ERROR_QUEUE_BYTES)} (1,000 x 16 KiB) + backlog_bytes {_mib(s.backlog_bytes)}"),
        road={"receive_window": 0},
    ),
    Class(
        "reads", "read floods of a big share",
        shape=lambda quick, keys: Shape(big=(256 << 10) if quick else 8 * MiB, extra_policy=_mallory({"allow": "read", "share": "big"})),
        params=lambda quick, keys: {"every": 0.05 if quick else 0.02},
        budget=lambda s, shape, params: _plus_allowance(shape.big, f"the share's {_mib(shape.big)} encoded once"),
    ),
    Class(
        "streams", "a message on each of many streams, then a PING flood",
        shape=lambda quick, keys: Shape(),
        params=lambda quick, keys: {"streams": 2048 if quick else 65535, "rate": 200 if quick else 1000},
        budget=_road,
    ),
    Class(
        "incomplete", "incomplete messages from three peers (eviction pressure; honest reads carry 200 KB)",
        shape=lambda quick, keys: Shape(attackers=("mallory", "mallory2", "mallory3")),
        params=lambda quick, keys: {"rate": 1e6 if quick else 9.8e6, "piece": 2000},
        budget=_road,
        attackers=3,
        pad=lambda quick: (100 << 10) if quick else 200_000,
    ),
    Class(
        "joins", "JOIN flood from unproven addresses (never answering a cookie)",
        shape=lambda quick, keys: Shape(),
        params=lambda quick, keys: {"keys": 200 if quick else 3000, "ports": 8 if quick else 40, "rate": 1000 if quick else 30_000},
        budget=lambda s, shape, params: _plus_allowance(0, "nothing admitted"),
        join=False,
        amplification=True,
    ),
    Class(
        "causal", "causal: a missing-dependency flood and forged dep signatures from an authorized publisher",
        shape=lambda quick, keys: Shape(cast=True, causal_owner=keys["owner"], causal_publishers=(keys["publisher"],),
                                        extra_policy=_mallory({"allow": "causal", "share": "causal"})),
        params=lambda quick, keys: {"seed": keys["seed"], "missing": 300 if quick else 20_000, "forged": 2 if quick else 5},
        budget=lambda s, shape, params: _plus_allowance(s.max_buffered * CAUSAL_PER_MESSAGE,
                                                f"max_buffered {s.max_buffered:,} x {CAUSAL_PER_MESSAGE} B"),
    ),
]

BY_NAME = {c.name: c for c in CLASSES}
