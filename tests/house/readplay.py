"""A behaviour for the real-estate read tests (loaded by a generated flow): shares worth reading."""

from __future__ import annotations

from flowcast.behaving.registry import Io, behaviour


@behaviour("readplay.fill")
class Fill:
    """At build: ``big`` holds a blob of ``size`` bytes, ``small`` one number."""

    def __init__(self, io: Io, size: int = 256 << 10) -> None:
        io.store.share("big").update(blob=b"b" * size)
        io.store.share("small").update(n=1)

    def __call__(self) -> None:
        return None
