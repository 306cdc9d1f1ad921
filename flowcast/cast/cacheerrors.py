"""The cache's errors, each with the ``reason`` a routed refusal names.

Separate from cache.py so the writer, the database opener and the
publisher side (which turns a refusal into a routed ``error``) share them
without importing the whole cache.
"""

from __future__ import annotations

from flowcast.errors import DamagedFile, Error

__all__ = ["CacheCorrupt", "CacheError", "CacheFull", "CacheLost"]


class CacheError(Error):
    """The cache refused or failed; ``reason`` is the routed error's word.

    ``io_error`` (the disk said no: full, read-only, failing), ``too_large``
    (a message over the size limit), ``closed``, ``read_only``.
    """

    def __init__(self, message: str, reason: str = "io_error") -> None:
        super().__init__(message)
        self.reason = reason


class CacheFull(CacheError):
    """Storing would pass the byte limit within retention: refused, nothing evicted."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "cache_full")


class CacheCorrupt(CacheError, DamagedFile):
    """The database file is unreadable, damaged, of another format or of another estate.

    The house refuses to start rather than replace it with a new, empty
    cache: that would silently lose every acknowledged message in it.
    """

    def __init__(self, path: object, why: str) -> None:
        super().__init__(f"the CAST cache {path} is unusable: {why}; it was left as it is (move it aside with its .hwm to start afresh, or restore it)", "corrupt")
        self.path = path


class CacheLost(CacheCorrupt):
    """The cache lost committed messages: it ends at ``high``, below its high-water mark ``marked``.

    Refused like any damaged cache, but one an operator may choose to
    serve as it is (``Cache.open(accept_loss=True)``, ``flowcast cast
    accept-loss``): nothing else can bring the lost messages back.
    """

    def __init__(self, path: object, why: str, high: int, marked: int) -> None:
        super().__init__(path, why)
        self.high = high
        self.marked = marked
