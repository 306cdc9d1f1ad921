"""A publisher process for the kill -9 test: publishes in a loop, prints each acknowledged id.

An id is printed only after its ticket completed without error, i.e. after
its transaction committed: the parent kills this process at a random point
and then checks that every printed id is in the cache.
"""

from __future__ import annotations

import sys

from flowcast.cast import Cache


def main(path: str, limit: int) -> None:
    cache = Cache.open(path, estate="abc")
    out = sys.stdout
    sent = []
    for n in range(limit):
        sent.append(cache.publish(f"abc/m/alice/{n}", b"x" * 100, publisher="alice"))
        if len(sent) >= 500:  # many in flight; acknowledge what is durable
            cache.wait(5.0)
            still = []
            for ticket in sent:
                if ticket.done:
                    if ticket.error is None:
                        out.write(ticket.id.hex() + "\n")
                else:
                    still.append(ticket)
            out.flush()
            sent = still


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
