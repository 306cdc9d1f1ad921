"""The cache against a plain in-memory model: random publishes, retries, clock jumps, expiry and reads.

The model is what docs/cast.md says: a message is stored once per id while
its id is remembered (retention + 10 min), reads return live messages in
seq order that match, and nothing is refused below the byte limit.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from flowcast.cast import Cache, IdMaker, matches
from flowcast.runtime.clock import VirtualClock

RETENTION = 100.0
GRACE = 600.0
NAMES = ["abc/m/alice/1", "abc/m/alice/2", "abc/m/bob/1", "abc/n/x"]
PATTERNS = [None, "abc/m/*/1", "abc/m/**", "abc/n/*", "abc/*/alice/*"]

op = st.one_of(
    st.tuples(st.just("publish"), st.integers(0, 3), st.booleans()),  # name, retry an old id?
    st.tuples(st.just("advance"), st.sampled_from([1.0, 30.0, 99.0, 101.0, 650.0])),
    st.tuples(st.just("expire")),
    st.tuples(st.just("read"), st.integers(0, len(PATTERNS) - 1), st.integers(1, 7)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(op, min_size=1, max_size=40), st.integers(0, 2**32))
def test_the_cache_behaves_like_its_model(ops, seed):
    rng = random.Random(seed)
    make = IdMaker(now_ms=lambda: 0, random_bits=rng.getrandbits)
    with tempfile.TemporaryDirectory() as tmp:
        clock = VirtualClock()
        cache = Cache.open(Path(tmp) / "c.sqlite3", estate="abc", clock=clock, retention=RETENTION)
        model: dict[bytes, dict] = {}  # id -> {seq, name, data, stamp}
        used: list[bytes] = []
        try:
            for step in ops:
                now = clock.now()
                if step[0] == "publish":
                    name = NAMES[step[1]]
                    ident = rng.choice(used) if step[2] and used else make()
                    data = rng.randbytes(rng.randint(0, 20))
                    ticket = cache.publish(name, data, id=ident)
                    cache.flush()
                    assert ticket.ok
                    known = model.get(ident)
                    if known is not None:  # remembered: a duplicate of the stored one
                        assert ticket.duplicate and ticket.seq == known["seq"]
                    else:
                        assert not ticket.duplicate
                        assert all(ticket.seq > m["seq"] for m in model.values())
                        model[ident] = {"seq": ticket.seq, "name": name, "data": data, "stamp": now}
                        used.append(ident)
                elif step[0] == "advance":
                    clock.advance_to(now + step[1])
                    # the model forgets ids GRACE after their message expired, as the cache's
                    # expiry does; the cache may only remember longer until its next pass
                elif step[0] == "expire":
                    cache.expire()
                    cache.flush()
                    for ident in [i for i, m in model.items() if m["stamp"] + RETENTION + GRACE <= now]:
                        del model[ident]
                else:
                    pattern, limit = PATTERNS[step[1]], step[2]
                    got = cache.read(0, pattern=pattern, limit=limit)
                    live = sorted(
                        (m for m in model.values()
                         if m["stamp"] + RETENTION > now and (pattern is None or matches(m["name"], pattern))),
                        key=lambda m: m["seq"],
                    )
                    assert [(s.seq, s.name, s.data) for s in got] == [
                        (m["seq"], m["name"], m["data"]) for m in live[:limit]
                    ]
        finally:
            cache.close()
