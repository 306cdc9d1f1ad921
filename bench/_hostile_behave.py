"""The victim's side of bench/hostile.py: behaviours its generated flow runs.

Each attack needs the victim estate to hold something worth attacking --
a share the honest peer reads, a big share, a CAST cache with messages
in it, a flow that sends to the attacker (so the attacker may answer with
error reports) -- and nothing else: the victim is a plain ``flowcast
run`` estate, so what the bench measures is what a user's estate does.
The flow loads this file by path (``load .../bench/_hostile_behave.py``).
"""

from __future__ import annotations

from typing import Iterator

from flowcast.behaving import Io, behaviour


@behaviour("hostile.setup")
def setup(io: Io, big: int = 0, cached: int = 0, size: int = 1024) -> Iterator[None]:
    """Once at start: the honest peer's ``probe`` share, a ``big`` share of that many bytes, ``cached`` messages in the cache.

    A generator, so it runs its setup once per entry and then costs a tick
    nothing; the cache's messages are published in one go and left to the
    cache's group commit.
    """
    io.store.share("probe").update(value=1)
    if big:
        io.store.share("big").update(value=b"b" * big)
    cast = getattr(io.house, "cast", None) if io.house is not None else None
    if cached and cast is not None:
        body = b"c" * size
        for n in range(cached):
            cast.publish(f"victim/m/{n % 64}", body, publisher="victim")
    while True:
        yield


@behaviour("hostile.stream")
def stream(io: Io, rate: float = 0.0, size: int = 256) -> Iterator[None]:
    """Publish ``rate`` messages a second (spread over the ticks) for the subscribers to be sent."""
    cast = getattr(io.house, "cast", None) if io.house is not None else None
    body = b"s" * size
    owed = 0.0
    last = io.now
    n = 0
    while True:
        now = io.now
        owed += (now - last) * rate
        last = now
        while cast is not None and owed >= 1:
            cast.publish(f"victim/live/{n % 16}", body, publisher="victim")
            owed -= 1
            n += 1
        yield


@behaviour("hostile.feed")
def feed(io: Io, dst: str = "sink@.mallory", rate: float = 0.0, size: int = 1024) -> Iterator[None]:
    """Send ``size``-byte messages to ``dst`` at ``rate`` a second from the queue share ``out``.

    Two things follow: the attacker may answer ``out`` with error reports
    for 300 s (the router's reply window, docs/routing.md), which land in
    ``out.error``; and an attacker that stops acknowledging makes what is
    sent here wait in the road's send queue to it.
    """
    router = io.house.router if io.house is not None else None
    io.store.queue("out")
    body = b"f" * size
    owed = 1.0  # one at once: the reply window opens before the attack starts
    last = io.now
    while True:
        now = io.now
        owed += (now - last) * rate
        last = now
        while router is not None and owed >= 1:
            router.send(dst, body, src="out", tag="feed")
            owed -= 1
        yield
