"""Causal mailboxes: delivery against a bare topological sort, verified end to end, memory, a fetch over a road.

The causal layer (``flowcast/causal``, contract ``docs/causal.md``) is
measured from the inside out: the mailbox alone, then one house from a
peer's wire bytes to the subscriber's queue, then what a buffered message
costs in memory, then a missing dependency fetched between two estates.
Every reference is measured in the same run, on the same data.

Figures (``--json`` names):

* ``causal_mailbox_chain``  deliveries/s of a bare ``Mailbox`` (no crypto,
  no I/O, no storage: hashes, publishers and deps only) on a chain of
  ``--count`` messages (100,000; each depends on the one before) offered in
  *reversed* order: every message but the last offered is buffered, and
  the last (the chain's root) releases them all.  Caps are set to the
  count so nothing is deferred.  Figure = messages / seconds of the offer
  loop (every ``Ready`` collected into one list); best of ``--repeats``.
  Ratio ``x toposort``: the same graph, in the same arrival order, sorted
  in the same run by a plain Kahn's algorithm written in this file
  (``toposort``): one pass builds a dict hash -> in-degree and a dict
  hash -> list of dependents, the zero in-degree hashes go into a deque,
  then pop, append to the output list, decrement each dependent's count
  and queue it at zero.  Keyed by the same 32-byte hashes; best of as
  many runs.  It knows the whole graph up front; the mailbox sees one
  message at a time and must be ready to deliver after each.
* ``causal_mailbox_dag``  the same for a wide random DAG: ``--count``
  messages, each naming 1 to 4 distinct random earlier ones (the first
  none), 16 publishers, offered in a shuffled order (fixed seed 7), ratio
  ``x toposort`` as above.
* ``causal_verified``  deliveries/s through one house's relay with every
  signature checked: ``--verified`` (20,000) pre-signed wire messages
  (``flowcast.causal.message.make``, 8 publishers round robin, 100 B of
  content; each names its publisher's previous message and the message
  made just before it, another publisher's) are fed by a micro-thread,
  512 per scheduler turn, into ``service.relay.accept(wire, "peer")`` as
  if a peer relay had forwarded them, in the order made (causal order, as a
  relay forwards in store order).  Each is decoded, its hsig verified
  (Ed25519), stored in the CAST cache (SQLite WAL, ``synchronous=FULL``,
  the cache's writer thread, a real clock), offered to a subscription's
  mailbox, its hash committed to the ledger (one transaction per turn)
  and pushed into the queue share.  Figure = messages / (last one in the
  queue - first accept); best of ``--repeats`` fresh houses.  Ratio ``x
  verify limit``: figure / the raw verify rate measured in the same run
  (PyNaCl ``VerifyKey.verify(SIG_PREFIX + hash, hsig)`` over the same
  messages, one core, keys built beforehand): the share of the
  single-core signature bound the whole path reaches.  On the 2-core VM
  this was written on (shared with other work) the path reached 40-50 %
  of it (6,000-8,000 deliveries/s against 13,000-17,000 verifies/s): the
  verify is the largest single cost of a delivery, the rest is decoding,
  the CAST publish and its writer thread (which shares the GIL), the
  mailbox, the ledger commit and the push.
* ``causal_bytes_per_buffered``  memory per buffered message: one house
  (simulated clock, inline cache writer: memory does not depend on it),
  owner message m0 never given; 8 publishers' chains whose first messages
  name m0.  After the first message of each chain is buffered (m0 is then
  missing and being fetched: the fixed costs are paid), tracemalloc is
  snapshotted; then ``--buffered`` (4,000) more messages arrive, are
  stored and buffered behind m0; figure = growth of everything tracemalloc
  sees (Python allocations of the whole house: relay index, claims and
  heads, mailbox entries and waiter lists, sync and shares; SQLite's own
  memory is not Python's and not counted, nor the wire bytes, which stay
  in the cache file) / the count.  Ratio ``x wire size``: figure / the
  mean wire size of those messages.  The note names the files the bytes
  were allocated in.
* ``causal_fetch_ms``  one missing dependency fetched over a real road:
  two estate processes (alpha, beta), each one manor with its own
  ``Scheduler(RealClock())``, a road on loopback UDP (``wire_road``,
  acceptance always), a CAST cache and a CausalService (``follow`` off, so
  only fetches carry messages).  Alpha holds a chain m0, m1, ...; for each
  round beta is handed m(2i+1), whose dep m(2i) only alpha holds; figure =
  median ms from ``relay.accept`` at beta until m(2i+1) is in beta's queue
  share, over ``--rounds`` rounds (20) after one warm-up.  That includes
  three fsyncs (storing the dependent message, storing the fetched dep,
  the ledger commit) and the fetch round trip.  Ratio ``x road rtt``:
  figure / the median of a plain routed round trip over the same road in
  the same run: beta sends a fetch-shaped request to alpha's ``causal``
  share under the same permission, alpha's handler answers with a
  have-sized reply, nothing stored or verified (50 round trips after one
  warm-up, sequential, 5 ms apart).  The median commit time
  of beta's cache (one publish to its durable ticket) is given alongside.

Run: ``.venv/bin/python bench/causal.py [--json] [--quick] [--repeats N]``.
Every wait is bounded; ``--quick`` (tiny sizes, figures meaningless) runs
in seconds.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BenchHouse, Figures, best_of, parser, timed  # noqa: E402
from _causalfetch import CONTENT, PUBLISHERS, TOPIC, add_fetch_figure, peer_rules, signed_chains, signing_key, topic_config  # noqa: E402

from flowcast.causal.mailbox import Mailbox  # noqa: E402
from flowcast.causal.message import SIG_PREFIX, TopicMsg, make  # noqa: E402

# -- 1, 2: the bare mailbox against Kahn's algorithm ------------------------------------

Node = tuple[bytes, bytes, tuple[bytes, ...]]  # (hash, publisher, deps)


def chain_graph(n: int, seed: int = 3) -> list[Node]:
    """A chain of ``n`` (each depends on the one before), in reversed arrival order."""
    rng = random.Random(seed)
    publisher = rng.randbytes(32)
    hashes = [rng.randbytes(32) for _ in range(n)]
    nodes = [(hashes[i], publisher, (hashes[i - 1],) if i else ()) for i in range(n)]
    nodes.reverse()
    return nodes


def dag_graph(n: int, seed: int = 7) -> list[Node]:
    """``n`` messages, each naming 1 to 4 distinct random earlier ones, 16 publishers, shuffled arrival."""
    rng = random.Random(seed)
    publishers = [rng.randbytes(32) for _ in range(16)]
    hashes = [rng.randbytes(32) for _ in range(n)]
    nodes = []
    for i in range(n):
        deps = tuple(hashes[j] for j in rng.sample(range(i), min(i, rng.randint(1, 4)))) if i else ()
        nodes.append((hashes[i], rng.choice(publishers), deps))
    rng.shuffle(nodes)
    return nodes


def toposort(nodes: list[Node]) -> list[bytes]:
    """Kahn's algorithm, plainly: in-degree counts, adjacency lists, a FIFO of the ready."""
    indegree: dict[bytes, int] = {}
    dependents: dict[bytes, list[bytes]] = {}
    for digest, _publisher, deps in nodes:
        indegree[digest] = len(deps)
        for dep in deps:
            found = dependents.get(dep)
            if found is None:
                dependents[dep] = [digest]
            else:
                found.append(digest)
    ready = deque(digest for digest, _publisher, deps in nodes if not deps)
    order: list[bytes] = []
    while ready:
        digest = ready.popleft()
        order.append(digest)
        for child in dependents.get(digest, ()):
            left = indegree[child] - 1
            indegree[child] = left
            if not left:
                ready.append(child)
    return order


def mailbox_run(nodes: list[Node]) -> tuple[float, list[Any]]:
    """Seconds to offer ``nodes`` in order to a fresh mailbox, and what it delivered (in order)."""
    n = len(nodes)
    box = Mailbox(max_buffered=n, max_per_publisher=n)
    offer = box.offer
    out: list[Any] = []

    def body() -> None:
        for seq, (digest, publisher, deps) in enumerate(nodes):
            out.extend(offer(digest, publisher, 0, deps, seq)[1])

    seconds = timed(body)
    return seconds, out


def check_order(nodes: list[Node], order: list[bytes]) -> None:
    """``order`` delivers every node once, each after all of its deps."""
    if len(order) != len(nodes) or len(set(order)) != len(nodes):
        raise RuntimeError(f"{len(order)} delivered of {len(nodes)} messages")
    position = {digest: i for i, digest in enumerate(order)}
    for digest, _publisher, deps in nodes:
        if any(position[dep] > position[digest] for dep in deps):
            raise RuntimeError("a message was delivered before one of its deps")


def mailbox_figure(nodes: list[Node], repeats: int) -> tuple[float, float]:
    """(mailbox deliveries/s, toposort nodes/s), each the best of ``repeats``, checked once."""
    n = len(nodes)
    seconds, out = mailbox_run(nodes)
    check_order(nodes, [ready.hash for ready in out])
    check_order(nodes, toposort(nodes))
    ours = min([seconds] + [mailbox_run(nodes)[0] for _ in range(max(0, repeats - 1))])
    theirs = best_of(repeats, lambda: timed(lambda: toposort(nodes)))
    return n / ours, n / theirs


# -- one house, in this process ------------------------------------------------------------


class House:
    """One manor with a CAST cache and a CausalService (no roads): what figures 3 and 4 run in."""

    def __init__(self, top: Path, clock: Any, topic: Any, *, estate: str = "beta", peers: tuple[str, ...] = ()) -> None:
        from flowcast.cast import CastConfig, CastService
        from flowcast.cast.cache import Cache
        from flowcast.causal.config import CausalConfig
        from flowcast.causal.service import CausalService
        from flowcast.routing.wiring import wire_router
        from flowcast.runtime import Scheduler
        from flowcast.store import Store

        self.scheduler = Scheduler(clock)
        self.store = Store(self.scheduler.clock.now, name="manor")
        self.house = BenchHouse(self.store, self.scheduler)
        self.router = wire_router(self.house, estate=estate, yard="manor", manor="manor", policy=peer_rules(peers))
        self.cache = Cache.open(top / "cache.sqlite3", estate=estate, clock=self.scheduler.clock, scheduler=self.scheduler)
        self.cast = CastService(self.router, cache=self.cache, config=CastConfig())
        self.service = CausalService(self.router, self.cast, CausalConfig(topics={TOPIC: topic}, peers=peers),
                                     state=top / "causal.sqlite3", follow=False)

    def close(self) -> None:
        self.service.close()
        self.cast.close()
        self.cache.close()
        for close in reversed(self.house.closers):
            close()


def _verified_messages(count: int, keys: list[Any]) -> list[TopicMsg]:
    out: list[TopicMsg] = []
    tips: dict[int, Any] = {}
    content = bytes(range(CONTENT))
    for i in range(count):
        p = i % len(keys)
        deps = [tips[p]] if p in tips else []
        if out and out[-1].publisher != bytes(keys[p].verify_key):
            deps.append(out[-1].id)
        out.append(make(keys[p], TOPIC, content, deps=deps))
        tips[p] = out[-1].id
    return out


def verify_rate(msgs: list[TopicMsg], repeats: int) -> float:
    """Raw Ed25519 verifies per second over the messages' own (publisher, hash, hsig), one core."""
    from nacl.signing import VerifyKey

    keys = {m.publisher: VerifyKey(m.publisher) for m in msgs}
    work = [(keys[m.publisher].verify, SIG_PREFIX + m.hash, m.hsig) for m in msgs]

    def body() -> None:
        for verify, signed, sig in work:
            verify(signed, sig)

    return len(work) / best_of(repeats, lambda: timed(body))


def verified_run(top: Path, topic: Any, wires: list[bytes], limit: float) -> float:
    """Deliveries per second from the first accept to the last message in the queue share, in a fresh house."""
    from flowcast.runtime import RealClock

    house = House(top, RealClock(), topic)
    count = len(wires)
    state: dict[str, Any] = {"got": 0, "start": None, "end": None}
    try:
        house.service.subscribe(TOPIC, "inbox")
        queue = house.store.queue("inbox")

        def on_push(share: Any) -> None:
            state["got"] += len(share.queue)
            share.queue.clear()
            if state["got"] >= count and state["end"] is None:
                state["end"] = time.perf_counter()
                house.scheduler.stop()

        queue.watchers.append(on_push)
        accept = house.service.relay.accept

        def feeder():  # type: ignore[no-untyped-def]
            state["start"] = time.perf_counter()
            for start in range(0, count, 512):
                for wire in wires[start:start + 512]:
                    outcome = accept(wire, "peer")
                    if outcome != "stored":
                        raise RuntimeError(f"the relay refused a message: {outcome}")
                yield None

        house.scheduler.spawn(feeder(), name="feeder")
        timer = house.scheduler.call_later(limit, house.scheduler.stop)
        enabled = gc.isenabled()
        gc.disable()
        try:
            house.scheduler.run()
        finally:
            if enabled:
                gc.enable()
        timer.cancel()
        if state["end"] is None:
            raise RuntimeError(f"verified: {state['got']:,} of {count:,} delivered within {limit:.0f} s "
                               f"(relay {dict(house.service.relay.counts)})")
        return count / (state["end"] - state["start"])
    finally:
        house.close()


# -- 4: memory per buffered message --------------------------------------------------------


def bytes_per_buffered(top: Path, count: int) -> dict[str, Any]:
    """tracemalloc growth of a house per message buffered behind one missing dep (see the docstring)."""
    from flowcast.runtime import VirtualClock

    owner = signing_key("owner")
    keys = [signing_key(f"pub{i}") for i in range(PUBLISHERS)]
    topic = topic_config(bytes(owner.verify_key), [bytes(k.verify_key) for k in keys])
    root = make(owner, TOPIC, b"never sent")  # m0: signed, never given to the house
    per = max(2, (count + PUBLISHERS - 1) // PUBLISHERS + 1)
    chains = signed_chains(per * PUBLISHERS, keys, first_deps=lambda p: [root.id])
    warm, rest = chains[:PUBLISHERS], chains[PUBLISHERS:PUBLISHERS + count]
    warm_wires = [m.wire for m in warm]
    rest_wires = [m.wire for m in rest]
    wire_size = sum(len(w) for w in rest_wires) / len(rest_wires)
    del chains, warm, rest
    house = House(top, VirtualClock(), topic, peers=("peer",))
    # The fetches go nowhere (no road here): what is measured is what the house holds while it
    # waits, not a router's notes of sends that failed (bench/cast_road.py does the same).
    house.router.send = lambda *args, **kwargs: True  # type: ignore[method-assign]
    try:
        sub = house.service.subscribe(TOPIC, "inbox")
        scheduler = house.scheduler

        def feed(wires: list[bytes], total: int) -> None:
            for wire in wires:
                if house.service.relay.accept(wire, "peer") != "stored":
                    raise RuntimeError("the relay refused a message")
            for _ in range(10_000):  # bounded: virtual time, a few ms of it per step
                if len(sub.mailbox.buffered) >= total:
                    return
                scheduler.run(until=scheduler.clock.now() + 0.001)
            raise RuntimeError(f"memory: {len(sub.mailbox.buffered)} of {total} buffered")

        feed(warm_wires, PUBLISHERS)
        if root.hash not in house.service.sync.missing:
            raise RuntimeError("memory: the root is not missing")
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            feed(rest_wires, PUBLISHERS + count)
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        stats = after.compare_to(before, "filename")
        grown = sum(stat.size_diff for stat in stats)
        top_files = sorted(stats, key=lambda s: -s.size_diff)[:4]
        where = {"/".join(Path(s.traceback[0].filename).parts[-2:]): round(s.size_diff / count) for s in top_files}
        if len(sub.mailbox.buffered) != PUBLISHERS + count or sub.delivered:
            raise RuntimeError("memory: the messages were not all buffered")
        return {"per": grown / count, "wire": wire_size, "where": where,
                "missing": len(house.service.sync.missing), "held": len(house.service.relay.index)}
    finally:
        house.close()


# -- the run -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=None, help="messages of the mailbox graphs (default 100,000; --quick 2,000)")
    p.add_argument("--verified", type=int, default=None, help="messages through the verified house (default 20,000; --quick 400)")
    p.add_argument("--buffered", type=int, default=None, help="messages buffered for the memory figure (default 4,000; --quick 400)")
    p.add_argument("--rounds", type=int, default=None, help="fetch rounds over the road (default 20; --quick 3)")
    args = p.parse_args(argv)
    count = args.count or (2_000 if args.quick else 100_000)
    verified = args.verified or (400 if args.quick else 20_000)
    buffered = args.buffered or (400 if args.quick else 4_000)
    rounds = args.rounds or (3 if args.quick else 20)
    repeats = 1 if args.quick else max(1, args.repeats)
    figures = Figures("causal", quick=args.quick, count=count, verified=verified, buffered=buffered, rounds=rounds, repeats=repeats,
                      load_average_before=round(os.getloadavg()[0], 2))

    # 1, 2: the mailbox alone.
    for name, nodes, how in (("causal_mailbox_chain", chain_graph(count), "a chain offered in reversed order"),
                             ("causal_mailbox_dag", dag_graph(count), "a random DAG (1-4 earlier deps each, 16 publishers) offered shuffled")):
        ours, theirs = mailbox_figure(nodes, repeats)
        figures.add(name, ours, "deliveries/s", ratios={"x toposort": ours / theirs}, extra={"toposort_per_s": theirs},
                    note=f"{count:,} messages, {how}; bare Mailbox vs Kahn's toposort {theirs:,.0f}/s")
        del nodes

    scratch = Path(tempfile.mkdtemp(prefix="flowcast-bench-causal-"))
    try:
        # 3: one house, every signature checked, every delivery committed.
        keys = [signing_key(f"pub{i}") for i in range(PUBLISHERS)]
        topic = topic_config(bytes(keys[0].verify_key), [bytes(k.verify_key) for k in keys])
        msgs = _verified_messages(verified, keys)
        wires = [m.wire for m in msgs]
        limit = 30.0 + verified / 500
        rates = []
        for round_ in range(repeats):
            (scratch / f"v{round_}").mkdir()
            rates.append(verified_run(scratch / f"v{round_}", topic, wires, limit))
        ours = max(rates)
        verifies = verify_rate(msgs[:20_000], repeats)
        wire = sum(len(w) for w in wires) / len(wires)
        del msgs, wires
        figures.add("causal_verified", ours, "deliveries/s", ratios={"x verify limit": ours / verifies},
                    extra={"verifies_per_s": verifies, "wire_bytes": round(wire)},
                    note=f"{verified:,} signed messages ({wire:.0f} B on the wire) from a peer to the queue: decode, verify, "
                         f"store (SQLite, fsync), mailbox, ledger, queue; {100 * ours / verifies:.0f}% of the "
                         f"{verifies:,.0f} Ed25519 verifies/s one core does")

        # 4: memory per buffered message.
        (scratch / "m").mkdir()
        mem = bytes_per_buffered(scratch / "m", buffered)
        where = ", ".join(f"{k} {v} B" for k, v in mem["where"].items())
        figures.add("causal_bytes_per_buffered", mem["per"], "B", ratios={"x wire size": mem["per"] / mem["wire"]},
                    extra={"wire_bytes": round(mem["wire"]), "by_file": mem["where"]},
                    note=f"tracemalloc growth of the house per message buffered behind one missing dep ({buffered:,} "
                         f"buffered; relay index, mailbox, sync; wire bytes stay in the cache); by file: {where}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    # 5: a missing dep fetched over a real road, against a plain routed round trip.
    add_fetch_figure(figures, rounds, 5 if args.quick else 50)
    figures.settings["load_average_after"] = round(os.getloadavg()[0], 2)
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
