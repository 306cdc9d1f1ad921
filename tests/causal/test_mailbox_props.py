"""Property tests of the causal mailbox against random message graphs (docs/causal.md, "The mailbox", "Epochs").

Random DAGs, random arrival order, loss, duplication and partial relays:
every delivered sequence is a linear extension of the DAG, every message
is delivered at most once, and all are delivered once the sync completes.
The Mailbox is driven directly (no I/O), the way the broker drives it:
``seq`` is a storage locator (the position in an append-only store) and
deferred messages are re-offered from :meth:`Mailbox.due` as
``broker.Broker.resume`` does.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from flowcast.causal.mailbox import BUFFERED, DEFERRED, DELIVERED, DUPLICATE, REJECTED, Mailbox, Ready

PUBLISHERS = tuple(bytes([0xA0 + p]) * 32 for p in range(4))
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- the model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dag:
    """A message graph: node ``i`` names ``deps[i]`` (earlier nodes), published by ``publishers[i]``."""

    deps: tuple[tuple[int, ...], ...]
    publishers: tuple[bytes, ...]
    salt: bytes = b""
    epoch: int = 0

    def __len__(self) -> int:
        return len(self.deps)

    @cached_property
    def hashes(self) -> tuple[bytes, ...]:
        """Arbitrary 32-byte hashes derived from the node index (and the epoch and a salt)."""
        return tuple(hashlib.blake2b(b"node/%d/%d/" % (self.epoch, i) + self.salt, digest_size=32).digest()
                     for i in range(len(self)))

    @cached_property
    def index(self) -> dict[bytes, int]:
        return {h: i for i, h in enumerate(self.hashes)}

    @cached_property
    def ancestors(self) -> tuple[frozenset[int], ...]:
        """Strict ancestors of each node (its deps, theirs, and so on)."""
        out: list[frozenset[int]] = []
        for deps in self.deps:
            closure: set[int] = set(deps)
            for d in deps:
                closure |= out[d]
            out.append(frozenset(closure))
        return tuple(out)

    def descendants(self, node: int) -> set[int]:
        return {i for i in range(len(self)) if node in self.ancestors[i]}

    @cached_property
    def sinks(self) -> set[int]:
        named = {d for deps in self.deps for d in deps}
        return set(range(len(self))) - named

    def blocked_by(self, missing: set[int]) -> set[int]:
        """Nodes that cannot be delivered while ``missing`` never arrives: those and their descendants."""
        return {i for i in range(len(self)) if i in missing or self.ancestors[i] & missing}

    def dep_hashes(self, node: int) -> tuple[bytes, ...]:
        return tuple(self.hashes[d] for d in self.deps[node])


@st.composite
def dags(draw, max_nodes: int = 60, epoch: int = 0) -> Dag:
    """n up to ``max_nodes`` nodes, each naming 0 to 4 distinct earlier nodes, from 1 to 4 publishers.

    A dep is drawn as a distance back, so shrinking makes chains (each node
    names the one before it), the graphs with the most order to get wrong.
    """
    n = draw(st.integers(1, max_nodes))
    raw = draw(st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 1 << 16), max_size=4)),
                        min_size=n, max_size=n))
    npub = draw(st.integers(1, len(PUBLISHERS)))
    salt = draw(st.binary(max_size=4))
    deps = tuple(tuple(dict.fromkeys(i - 1 - r % i for r in back)) if i else () for i, (_p, back) in enumerate(raw))
    publishers = tuple(PUBLISHERS[p % npub] for p, _back in raw)
    return Dag(deps, publishers, salt, epoch)


def arrivals(data, n: int, label: str = "arrivals") -> tuple[list[int], set[int]]:
    """A random arrival sequence of ``range(n)``: a permutation, a random subset lost, random duplicates inserted."""
    order = data.draw(st.permutations(range(n)), label=f"{label}: order")
    lost = data.draw(st.sets(st.integers(0, n - 1), max_size=max(1, n // 3)), label=f"{label}: lost")
    arrived = [i for i in order if i not in lost]
    return with_duplicates(data, arrived, label), lost


def with_duplicates(data, seq: list[int], label: str) -> list[int]:
    out = list(seq)
    if not out:
        return out
    extra = data.draw(st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 1 << 16)), max_size=len(out) // 2 + 1),
                      label=f"{label}: duplicates")
    for which, where in extra:
        out.insert(where % (len(out) + 1), out[which % len(out)])
    return out


class Run:
    """One mailbox driven by the test: checks each answer against the model, and the state after each step."""

    def __init__(self, dag: Dag, box: Mailbox | None = None, *, graphs: tuple[Dag, ...] = ()) -> None:
        self.dags = graphs or (dag,)
        self.box = box if box is not None else Mailbox()
        self.delivered: list[tuple[int, int]] = []  # (epoch, node) in delivery order
        self.position: dict[tuple[int, int], int] = {}
        self.storage: list[tuple[int, int]] = []  # the append-only store: seq -> (epoch, node)
        self.seq_of: dict[tuple[int, int], int] = {}
        self.most_buffered = 0

    def dag(self, epoch: int) -> Dag:
        return next(d for d in self.dags if d.epoch == epoch)

    def where(self, hash: bytes) -> tuple[int, int]:
        for dag in self.dags:
            if hash in dag.index:
                return dag.epoch, dag.index[hash]
        raise AssertionError(f"a hash nobody offered was delivered: {hash.hex()}")

    def store(self, epoch: int, node: int) -> int:
        key = (epoch, node)
        if key not in self.seq_of:
            self.seq_of[key] = len(self.storage)
            self.storage.append(key)
        return self.seq_of[key]

    def offer(self, node: int, epoch: int = 0) -> tuple[str, list[Ready]]:
        dag = self.dag(epoch)
        box = self.box
        h = dag.hashes[node]
        publisher = dag.publishers[node]
        seq = self.store(epoch, node)
        seen = box.is_delivered(h, epoch) or h in box.buffered
        deps_done = all(box.is_delivered(d, epoch) for d in dag.dep_hashes(node))
        dep_rejected = any(d in box.rejected for d in dag.dep_hashes(node))
        full = box.per_publisher[publisher] >= box.max_per_publisher or len(box.buffered) >= box.max_buffered
        was_rejected = h in box.rejected
        status, ready = box.offer(h, publisher, epoch, dag.dep_hashes(node), seq, (epoch, node))
        if seen:
            assert (status, ready) == (DUPLICATE, []), (node, status)
        elif was_rejected:
            assert (status, ready) == (REJECTED, [])
        elif deps_done:
            assert status == DELIVERED and ready and ready[0].hash == h and ready[0].lag == 0.0, (node, status)
        elif dep_rejected:
            assert (status, ready) == (REJECTED, []), (node, status)
            assert box.rejected[h][1] == "dep_rejected"
        elif full:
            assert (status, ready) == (DEFERRED, []), (node, status)
            assert any(p.seq == seq for p in box.deferred.by_publisher[publisher].values())
        else:
            assert (status, ready) == (BUFFERED, []), (node, status)
            assert box.buffered[h].seq == seq
        self.take(ready)
        self.invariants()
        return status, ready

    def take(self, ready: list[Ready]) -> None:
        """Record deliveries: each hash once, each after all its deps (the linear-extension check, step by step)."""
        for r in ready:
            key = self.where(r.hash)
            epoch, node = key
            dag = self.dag(epoch)
            assert key not in self.position, f"node {node} of epoch {epoch} delivered twice"
            for d in dag.deps[node]:
                assert (epoch, d) in self.position, f"node {node} delivered before its dep {d}"
            assert (r.publisher, r.epoch, r.seq, r.item) == (dag.publishers[node], epoch, self.seq_of[key], key)
            assert r.lag >= 0.0
            self.position[key] = len(self.delivered)
            self.delivered.append(key)

    def nodes(self, epoch: int = 0) -> list[int]:
        return [n for e, n in self.delivered if e == epoch]

    def invariants(self) -> None:
        """What the mailbox holds agrees with itself: counts, waiting numbers, waiter lists, caps."""
        box = self.box
        assert len(box.buffered) <= box.max_buffered
        self.most_buffered = max(self.most_buffered, len(box.buffered))
        counted = Counter(e.publisher for e in box.buffered.values())
        assert all(0 <= c <= box.max_per_publisher for c in box.per_publisher.values()), box.per_publisher
        assert +box.per_publisher == counted
        for h, entry in box.buffered.items():
            assert entry.hash == h and h not in box.rejected
            assert not box.is_delivered(h, entry.epoch)
            missing = box.missing_of(entry)
            assert entry.waiting == len(missing) > 0, entry
            for d in missing:
                assert any(w is entry for w in box.waiting_for(d)), (entry, d)
        for d in box.waiters:
            waiting = box.waiting_for(d)
            assert waiting, "an empty waiter list is kept"
            for w in waiting:
                assert box.buffered.get(w.hash) is w and d in w.deps
        for epoch, done in box.delivered.items():
            assert not done & box.buffered.keys()
            assert done == {self.dag(epoch).hashes[n] for n in self.nodes(epoch)}

    def resume(self) -> None:
        """Re-offer deferred messages as ``Broker.resume`` does: what :meth:`Mailbox.due` hands back, by seq,
        until nothing more is due (each offer may wake more)."""
        for _round in range(10_000):
            due = self.box.due()
            if not due:
                return
            for entry in sorted(due, key=lambda p: p.seq):
                epoch, node = self.storage[entry.seq]
                self.offer(node, epoch)
        raise AssertionError("resuming never settles")

    def settled(self) -> None:
        """Everything offered was delivered: nothing buffered, waited for, counted or deferred."""
        box = self.box
        assert box.buffered == {}
        assert box.waiters == {}
        assert box.waited() == []
        assert all(c == 0 for c in box.per_publisher.values())
        assert not box.deferred and box.deferred.on == {} and box.woken == []


def assert_linear_extension(dag: Dag, sequence: list[int]) -> None:
    place = {n: k for k, n in enumerate(sequence)}
    assert len(place) == len(sequence), "a node delivered twice"
    for n in sequence:
        for d in dag.deps[n]:
            assert d in place and place[d] < place[n], f"{n} delivered before its dep {d}"


# -- the properties -------------------------------------------------------------------------


@SETTINGS
@given(st.data())
def test_arrival_loss_and_duplication_then_sync_delivers_a_linear_extension_once(data) -> None:
    dag = data.draw(dags())
    n = len(dag)
    arriving, lost = arrivals(data, n)
    run = Run(dag)
    for node in arriving:
        run.offer(node)
    blocked = dag.blocked_by(lost)
    event(f"buffered before the sync: {bool(blocked - lost)}")
    # before the sync: exactly what does not descend from a lost message is delivered
    assert set(run.nodes()) == set(range(n)) - blocked
    assert set(run.box.buffered) == {dag.hashes[i] for i in blocked - lost}
    assert set(run.box.waited()) == {dag.hashes[d] for i in blocked - lost for d in dag.deps[i] if d in lost}
    for i in blocked - lost:
        assert set(run.box.missing_of(run.box.buffered[dag.hashes[i]])) == {dag.hashes[d] for d in dag.deps[i]
                                                                            if d in blocked}
    # the sync: the lost ones arrive (in any order, maybe twice), and anything may be offered again
    again = with_duplicates(data, data.draw(st.permutations(sorted(lost)), label="sync order"), "sync")
    again += data.draw(st.lists(st.integers(0, n - 1), max_size=5), label="late duplicates")
    for node in again:
        run.offer(node)
    assert sorted(run.nodes()) == list(range(n))
    assert_linear_extension(dag, run.nodes())
    run.settled()
    assert run.box.counts[DELIVERED] == n
    assert run.box.frontier(0, limit=n) and set(run.box.frontier(0, limit=n)) == {dag.hashes[i] for i in dag.sinks}


@SETTINGS
@given(st.data())
def test_partial_relays_each_mailbox_delivers_a_linear_extension_and_completes_after_sync(data) -> None:
    dag = data.draw(dags())
    n = len(dag)
    relays = data.draw(st.integers(2, 4), label="relays")
    # which relays each message reached first; every message reached at least one
    masks = data.draw(st.lists(st.integers(1, (1 << relays) - 1), min_size=n, max_size=n), label="holders")
    held = [{i for i in range(n) if masks[i] >> r & 1} for r in range(relays)]
    runs = [Run(dag) for _ in range(relays)]
    for r, run in enumerate(runs):
        order = [i for i in data.draw(st.permutations(range(n)), label=f"relay {r} order") if i in held[r]]
        for node in with_duplicates(data, order, f"relay {r}"):
            run.offer(node)
        assert set(run.nodes()) == set(range(n)) - dag.blocked_by(set(range(n)) - held[r])
    # the sync: each relay gets what it lacks from the union the others hold, in any order
    for r, run in enumerate(runs):
        lacking = sorted(set().union(*(held[o] for o in range(relays) if o != r)) - held[r])
        mode = data.draw(st.sampled_from(["random", "another relay's delivered order"]), label=f"relay {r} sync")
        if mode == "random":
            fetched = data.draw(st.permutations(lacking), label=f"relay {r} fetched")
        else:  # what a peer forwards: its own delivered order, which reaches only what it delivered
            source = runs[(r + 1) % relays]
            fetched = [i for i in source.nodes() if i not in held[r]] + lacking
        for node in with_duplicates(data, fetched, f"relay {r} sync"):
            run.offer(node)
    for run in runs:
        assert sorted(run.nodes()) == list(range(n))
        assert_linear_extension(dag, run.nodes())
        run.settled()


@SETTINGS
@given(st.data())
def test_caps_defer_and_resume_deliver_everything_once_within_the_caps(data) -> None:
    dag = data.draw(dags())
    n = len(dag)
    arriving, lost = arrivals(data, n)
    max_buffered = data.draw(st.integers(1, 6), label="max_buffered")
    max_per_publisher = data.draw(st.integers(1, 4), label="max_per_publisher")
    run = Run(dag, Mailbox(max_buffered=max_buffered, max_per_publisher=max_per_publisher))
    for node in arriving:
        if run.offer(node)[1]:
            run.resume()  # the broker resumes after every turn that delivered
    blocked = dag.blocked_by(lost)
    assert set(run.nodes()) == set(range(n)) - blocked, "a deferred message is held up though all its deps arrived"
    for node in with_duplicates(data, data.draw(st.permutations(sorted(lost)), label="sync order"), "sync"):
        if run.offer(node)[1]:
            run.resume()
    assert sorted(run.nodes()) == list(range(n))
    assert_linear_extension(dag, run.nodes())
    run.settled()
    assert run.most_buffered <= max_buffered
    event(f"deferred: {run.box.counts[DEFERRED] > 0}")


@SETTINGS
@given(st.data())
def test_rejecting_a_message_rejects_exactly_its_descendants_and_delivers_the_rest(data) -> None:
    dag = data.draw(dags())
    n = len(dag)
    arriving, lost = arrivals(data, n)
    if lost and data.draw(st.booleans(), label="reject a lost one"):  # what waits for it is buffered
        target = data.draw(st.sampled_from(sorted(lost)), label="rejected node")
    else:
        target = data.draw(st.integers(0, n - 1), label="rejected node")
    when = data.draw(st.integers(0, len(arriving)), label="rejected after this many arrivals")
    run = Run(dag)
    for node in arriving[:when]:
        run.offer(node)
    box = run.box
    h = dag.hashes[target]
    was_delivered = box.is_delivered(h, 0)
    buffered_before = set(box.buffered)
    box_deps = {b: e.deps for b, e in box.buffered.items()}
    gone = box.reject(h, "invalid", 0)
    run.invariants()
    event(f"rejected when delivered: {was_delivered}, taking {min(len(gone), 2)}+ buffered")
    if was_delivered:  # too late: a delivered message stays delivered, and so may its dependents be
        affected: set[int] = set()
        assert gone == []
    else:
        affected = dag.descendants(target) | {target}
        # what the mailbox can know goes with it now: the buffered messages that name it, those naming them...
        known = {h}
        while grown := {b for b in buffered_before - known if known & set(box_deps[b])}:
            known |= grown
        assert {e.hash for e in gone} == known & buffered_before
        assert len(gone) == len({e.hash for e in gone})
        if h in buffered_before:
            assert gone[0].hash == h
        assert box.rejected[h] == (0, "invalid")
    for node in arriving[when:]:
        run.offer(node)
    for node in data.draw(st.permutations(sorted(lost)), label="sync order"):
        run.offer(node)
    delivered = run.nodes()
    assert set(delivered) == set(range(n)) - affected
    assert_linear_extension(dag, delivered)
    assert set(box.rejected) == {dag.hashes[i] for i in affected}
    for i in affected - {target}:
        assert box.rejected[dag.hashes[i]] == (0, "dep_rejected")
    run.settled()
    # offered again, a rejected message stays rejected, a delivered one is a duplicate
    for node in data.draw(st.lists(st.integers(0, n - 1), max_size=4), label="offered again"):
        run.offer(node)
    assert run.nodes() == delivered


@SETTINGS
@given(st.data())
def test_closing_an_epoch_abandons_exactly_its_buffered_messages(data) -> None:
    epochs = data.draw(st.lists(st.integers(0, 9), min_size=2, max_size=3, unique=True), label="epochs")
    graphs = tuple(data.draw(dags(max_nodes=25, epoch=e), label=f"epoch {e}") for e in epochs)
    plans = {g.epoch: arrivals(data, len(g), f"epoch {g.epoch}") for g in graphs}
    # the epochs' arrivals interleave at random
    streams = {e: list(arriving) for e, (arriving, _lost) in plans.items()}
    run = Run(graphs[0], graphs=graphs)
    while any(streams.values()):
        epoch = data.draw(st.sampled_from(sorted(e for e, s in streams.items() if s)), label="next epoch")
        run.offer(streams[epoch].pop(0), epoch)
    box = run.box
    closing = data.draw(st.sampled_from(epochs), label="closing")
    closed = run.dag(closing)
    _arriving, lost = plans[closing]
    stuck = closed.blocked_by(lost) - lost
    before = {h: e for h, e in box.buffered.items() if e.epoch != closing}
    kept = {e: set(s) for e, s in box.delivered.items() if e != closing}
    abandoned = box.close_epoch(closing)
    assert {e.hash for e in abandoned} == {closed.hashes[i] for i in stuck}
    event(f"abandoned: {bool(abandoned)}, others buffered: {bool(before)}")
    assert all(e.epoch == closing for e in abandoned)
    assert box.buffered == before  # the other epochs' buffered messages, untouched
    assert {e: s for e, s in box.delivered.items()} == kept
    assert closing not in box.epochs() and box.frontier(closing) == []
    assert not any(w.epoch == closing for d in box.waiters for w in box.waiting_for(d))
    run.delivered = [(e, i) for e, i in run.delivered if e != closing]
    run.position = {k: p for k, p in run.position.items() if k[0] != closing}
    run.dags = tuple(g for g in graphs if g.epoch != closing)
    run.invariants()
    # the other epochs complete when their lost messages arrive
    for g in run.dags:
        for node in sorted(plans[g.epoch][1]):
            run.offer(node, g.epoch)
        assert sorted(run.nodes(g.epoch)) == list(range(len(g)))
        assert_linear_extension(g, run.nodes(g.epoch))
    run.settled()
    assert box.epochs() == sorted(g.epoch for g in run.dags)


@SETTINGS
@given(st.data())
def test_the_frontier_of_a_delivered_dag_is_its_sinks(data) -> None:
    dag = data.draw(dags())
    n = len(dag)
    arriving, _lost = arrivals(data, n)
    run = Run(dag)
    for node in arriving:
        run.offer(node)
    for node in range(n):  # nothing lost this time: the rest arrives in index order
        run.offer(node)
    limit = data.draw(st.integers(1, 70), label="limit")
    sinks = sorted(dag.sinks, key=lambda i: run.position[(0, i)])
    frontier = run.box.frontier(0, limit)
    assert frontier == [dag.hashes[i] for i in sinks][-limit:]  # the newest sinks, oldest first
    if limit >= len(sinks):
        assert set(frontier) == {dag.hashes[i] for i in dag.sinks}
    assert run.box.frontier(1) == []
