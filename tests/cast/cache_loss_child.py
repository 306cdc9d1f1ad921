"""A publisher for the lost-WAL test: commits COUNT messages, says so, then waits to be killed with kill -9.

It prints ``acked N`` once all N tickets completed without error (their
transactions committed) and then blocks on stdin, so the parent decides
when the kill comes and the cache is never closed (its WAL stays as the
crash left it).
"""

from __future__ import annotations

import sys

from flowcast.cast import Cache


def main(path: str, count: int) -> None:
    cache = Cache.open(path, estate="abc")
    tickets = []
    for n in range(count):
        tickets.append(cache.publish(f"abc/m/alice/{n}", b"x" * 100, publisher="alice"))
        if len(tickets) % 500 == 0:
            cache.flush()  # several transactions, as a live stream makes
    cache.flush()
    assert all(t.ok for t in tickets)
    print(f"acked {max(t.seq for t in tickets)}", flush=True)
    sys.stdin.read()  # until the parent kills this process


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
