"""Pause the cyclic garbage collector while building long-lived structures.

Loading and building a flow allocates hundreds of thousands of objects that
all live as long as the house and form no garbage; each generation-2
collection meanwhile rescans them all.  For a 10,000-framer flow that was
more than half the load time.  Pausing the collector for the duration and
restoring it afterwards costs nothing else.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
