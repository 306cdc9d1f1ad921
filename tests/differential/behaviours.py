"""One minimal behaviour, registered identically with Ioflo and with flowcast.

Corpus scripts that ``do diff step`` name this module in their header
(``# behaviors: tests.differential.behaviours``).  Ioflo imports it before
building (its ``-b`` option), which registers the Doer ``DiffStep``; the
flowcast side of the differential test adds the marked function to the
behaviour registry of the house it builds.  Both add ``by`` (default 1) to
the share bound with ``per out SHARE`` each time the act runs, so the only
thing left to differ is *when* each runtime runs it.
"""

from __future__ import annotations

import collections.abc  # noqa: F401  -- ioflo 2.0.3 needs it imported first on 3.11
from typing import Any

from ioflo.base.doing import doify

from flowcast.behaving import Io, behaviour


@doify("DiffStep")
def ioflo_diff_step(self: Any, amount: int = 1, **kwa: Any) -> None:
    """Ioflo side: ``self.out`` is the share of the ``per out`` ioinit."""
    self.out.update(value=(self.out.value or 0) + amount)


@behaviour("diff.step")
def diff_step(io: Io, amount: int = 1) -> None:
    """flowcast side: ``io["out"]`` is the share of ``per out``."""
    share = io["out"]
    share.update(value=(share.get("value") or 0) + amount)
