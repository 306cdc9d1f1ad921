"""Fixtures the routing tests share: two connected estates, and a reader of another estate's share.

A module that needs another world or pair (a seed, more yards) defines its own ``world`` or
``pair``, which pytest uses there instead of these.
"""

from __future__ import annotations

import pytest

from tests.routing.kit import ALLOW_ALPHA, ALLOW_BETA, World


@pytest.fixture
def world():
    return World(seed=5)


@pytest.fixture
def pair(world):
    """alpha and beta, yards manor and w1 each, connected, each allowing the other."""
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor", "w1"], policy=ALLOW_ALPHA)
    world.connect(alpha, beta)
    return alpha, beta


@pytest.fixture
def readers(world):
    """alpha, which lets in nothing but answers, may read beta's share ``state`` (n=1) into its
    ``mine``: (alpha, beta, the values of n that landed in ``mine``)."""
    alpha = world.routed_estate("alpha", ["manor"], policy=[])
    beta = world.routed_estate("beta", ["manor"], policy=[{"allow": "read", "estate": "alpha"}])
    world.connect(alpha, beta)
    beta.store("manor").share("state").update(n=1)
    mine = alpha.store("manor").share("mine")
    got: list = []
    mine.watchers.append(lambda share: got.append(share.get("n")))
    return alpha, beta, got
