"""Shared fixtures for the differential suite: one Ioflo run per corpus script.

Ioflo's build is the slow part of the suite, so the first oracle run of each
script is cached for the session and reused by every test that needs it.
"""

from __future__ import annotations

import collections.abc  # noqa: F401  -- must precede any ioflo import on 3.11
from typing import Callable

import pytest

from tests.differential.corpus import CorpusScript
from tests.differential.ioflo_oracle import OracleRun, ioflo_run


@pytest.fixture(scope="session")
def oracle() -> Callable[[CorpusScript], OracleRun]:
    """Return ``run(script) -> OracleRun``, memoised per script for the session."""
    cache: dict[str, OracleRun] = {}

    def run(script: CorpusScript) -> OracleRun:
        key = str(script.path)
        if key not in cache:
            cache[key] = ioflo_run(script.path, script.period, script.until, script.behaviors)
        return cache[key]

    return run
