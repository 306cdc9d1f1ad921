"""A progress bar for long exports, on stderr, without a dependency.

It stays silent for runs shorter than ``delay`` seconds (most runs), and
when stderr is not a terminal unless forced, so logs and tests stay clean.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``advance()`` per item; ``close()`` at the end."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        delay: float = 0.5,
        width: int = 30,
    ) -> None:
        self.total = max(0, total)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = width
        self.done = 0
        self.start = time.monotonic()
        self.delay = delay
        self._last = 0.0
        self.drawn = False

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < self.delay or (now - self._last < 0.1 and self.done < self.total):
            return
        self._last = now
        self._draw(now)

    def _draw(self, now: float) -> None:
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self.width)
        rate = self.done / max(now - self.start, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
            f"{self.done}/{self.total} ({frac:.0%}, eta {eta:.0f}s)"
        )
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
