"""The most memory a call made: how the tests of hostile msgpack hold decoders to what the bytes hold."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable


def traced_peak(call: Callable[[], object]) -> tuple[int, object]:
    """(the most bytes traced while ``call`` ran, what it returned -- or the exception it raised)."""
    tracemalloc.start()
    try:
        try:
            outcome: object = call()
        except Exception as error:  # noqa: BLE001 - what is raised is the outcome
            outcome = error
        return tracemalloc.get_traced_memory()[1], outcome
    finally:
        tracemalloc.stop()
