"""The causal mailbox on hand-picked cases (docs/causal.md, "The mailbox", "Epochs"); random graphs are in test_mailbox_props."""

from __future__ import annotations

import pytest

from flowcast.causal.mailbox import BUFFERED, DEFERRED, DELIVERED, DUPLICATE, REJECTED, Mailbox

P, Q = b"\xa1" * 32, b"\xb2" * 32
A, B, C, D, E, X = (bytes([n]) * 32 for n in (0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def hashes(ready) -> list[bytes]:
    return [r.hash for r in ready]


def test_the_caps_are_at_least_one() -> None:
    with pytest.raises(ValueError):
        Mailbox(max_buffered=0)
    with pytest.raises(ValueError):
        Mailbox(max_per_publisher=0)


def test_a_message_offered_again_is_a_duplicate_whether_delivered_or_buffered() -> None:
    box = Mailbox()
    status, ready = box.offer(A, P, 0, ())
    assert status == DELIVERED and hashes(ready) == [A]
    assert box.offer(A, P, 0, ()) == (DUPLICATE, [])
    assert box.offer(C, P, 0, (B,)) == (BUFFERED, [])
    assert box.offer(C, P, 0, (B,)) == (DUPLICATE, [])
    assert box.counts[DUPLICATE] == 2 and box.counts[DELIVERED] == 1
    assert list(box.buffered) == [C] and box.per_publisher[P] == 1 and box.waiting_for(B) == [box.buffered[C]]
    status, ready = box.offer(B, P, 0, (A,))
    assert status == DELIVERED and hashes(ready) == [B, C]
    assert box.offer(C, P, 0, (B,)) == (DUPLICATE, [])


def test_lag_is_the_time_a_message_spent_buffered_on_the_mailbox_clock() -> None:
    clock = Clock()
    box = Mailbox(clock=clock)
    clock.now = 10.0
    assert box.offer(B, P, 0, (A,), seq=2, item="b")[0] == BUFFERED
    clock.now = 12.0
    assert box.offer(C, Q, 0, (B,), seq=3, item="c")[0] == BUFFERED
    assert box.buffered[B].since == 10.0
    clock.now = 13.5
    status, ready = box.offer(A, P, 0, (), seq=1, item="a")
    assert status == DELIVERED
    assert [(r.hash, r.publisher, r.seq, r.item, r.lag) for r in ready] == [
        (A, P, 1, "a", 0.0), (B, P, 2, "b", 3.5), (C, Q, 3, "c", 1.5)]


def test_a_message_whose_dep_is_rejected_is_rejected_at_once() -> None:
    box = Mailbox()
    assert box.reject(A, "invalid") == []
    assert box.rejected[A] == (0, "invalid")
    assert box.offer(B, P, 0, (X, A)) == (REJECTED, [])
    assert box.rejected[B] == (0, "dep_rejected")
    assert box.buffered == {} and box.waiters == {} and box.per_publisher[P] == 0
    assert box.offer(B, P, 0, (X, A)) == (REJECTED, [])  # and stays so
    assert box.counts["rejected_dep_rejected"] == 1


def test_what_waits_for_a_message_rejected_on_offer_is_rejected_with_it() -> None:
    """Regression: C waited for B; B came naming the rejected A and was rejected, and C stayed buffered for ever."""
    box = Mailbox()
    box.reject(A, "invalid")
    assert box.offer(C, Q, 0, (B,)) == (BUFFERED, [])
    assert box.offer(D, Q, 0, (C,)) == (BUFFERED, [])
    assert box.offer(B, P, 0, (A,)) == (REJECTED, [])
    assert box.rejected == {A: (0, "invalid"), B: (0, "dep_rejected"), C: (0, "dep_rejected"), D: (0, "dep_rejected")}
    assert box.buffered == {} and box.waiters == {} and box.per_publisher[Q] == 0
    assert box.counts["rejected_dep_rejected"] == 3


def test_rejecting_takes_the_buffered_message_then_its_dependents_and_not_a_delivered_one() -> None:
    box = Mailbox()
    box.offer(A, P, 0, ())
    box.offer(C, P, 0, (B,))
    box.offer(D, Q, 0, (C, A))
    box.offer(E, Q, 0, (A,))
    assert hashes(box.offer(X, Q, 0, (E,))[1]) == [X]
    assert box.reject(A, "invalid") == [] and A not in box.rejected  # delivered: too late to reject
    gone = box.reject(C, "invalid")
    assert [g.hash for g in gone] == [C, D]
    assert box.rejected == {C: (0, "invalid"), D: (0, "dep_rejected")}
    assert box.buffered == {} and box.waiters == {} and +box.per_publisher == {}


def test_a_dep_delivered_in_another_epoch_rejects_its_dependent_on_release_as_cross_epoch() -> None:
    box = Mailbox()
    assert box.offer(B, P, 1, (A,)) == (BUFFERED, [])
    assert box.offer(C, P, 1, (B,)) == (BUFFERED, [])
    assert box.offer(D, Q, 0, (A,)) == (BUFFERED, [])
    status, ready = box.offer(A, P, 0, ())
    assert status == DELIVERED and hashes(ready) == [A, D]  # B is epoch 1: its dep of epoch 0 never counts
    assert box.rejected == {B: (1, "cross_epoch"), C: (1, "dep_rejected")}
    assert box.buffered == {} and box.waiters == {} and +box.per_publisher == {}
    assert [(e.hash, why) for e, why in box.swept] == [(B, "cross_epoch"), (C, "dep_rejected")]  # for the caller to report
    assert not box.is_delivered(B, 1) and not box.is_delivered(B, 0)


def test_messages_made_ready_together_come_oldest_buffered_first() -> None:
    box = Mailbox()
    box.offer(C, P, 0, (A,))
    box.offer(B, Q, 0, (A,))
    box.offer(D, Q, 0, (C,))
    assert hashes(box.offer(A, P, 0, ())[1]) == [A, C, B, D]


def seqs(entries) -> list[int]:
    return sorted(p.seq for p in entries)


def test_over_a_cap_each_deferred_message_is_kept_by_seq_under_one_dep_it_waits_for() -> None:
    box = Mailbox(max_per_publisher=1)
    assert box.offer(B, P, 0, (A,), seq=1)[0] == BUFFERED
    assert box.offer(C, P, 0, (A,), seq=7) == (DEFERRED, [])
    assert box.offer(D, P, 0, (A, X), seq=3) == (DEFERRED, [])
    assert box.offer(E, P, 0, (X,), seq=9) == (DEFERRED, [])
    assert box.offer(X, Q, 0, (A,), seq=8)[0] == BUFFERED  # another publisher has room
    assert len(box.deferred) == 3 and box.counts[DEFERRED] == 3
    assert len(box.buffered) == 2 and C not in box.buffered
    assert box.due() == []  # no room, and nothing delivered since
    status, ready = box.offer(A, Q, 0, (), seq=0)
    assert status == DELIVERED and hashes(ready) == [A, B, X]
    # C and D waited under A; E under X, which was released with it
    assert seqs(box.due()) == [3, 7, 9] and not box.deferred


def test_a_deferred_message_that_became_deliverable_is_due_though_the_buffer_is_full() -> None:
    """Regression: M2 filled P's room waiting for M1, deferred waiting for R; R came and nothing moved again."""
    m1, m2, r = B, C, A
    box = Mailbox(max_per_publisher=1)
    assert box.offer(m2, P, 0, (m1,), seq=2) == (BUFFERED, [])
    assert box.offer(m1, P, 0, (r,), seq=1) == (DEFERRED, [])
    assert box.offer(r, Q, 0, (), seq=0)[0] == DELIVERED
    assert seqs(box.due()) == [1]
    status, ready = box.offer(m1, P, 0, (r,), seq=1)
    assert status == DELIVERED and hashes(ready) == [m1, m2]
    assert box.offer(m2, P, 0, (m1,), seq=2) == (DUPLICATE, [])
    assert box.due() == [] and box.buffered == {} and not box.deferred


def test_a_deferred_message_with_nothing_new_delivered_waits_for_room() -> None:
    box = Mailbox(max_buffered=1)
    assert box.offer(B, P, 0, (A,), seq=1)[0] == BUFFERED
    assert box.offer(D, Q, 0, (C,), seq=2) == (DEFERRED, [])
    assert box.due() == []
    assert box.offer(D, Q, 0, (C,), seq=2) == (DEFERRED, [])  # offered again, still no room: kept once, no busy loop
    assert len(box.deferred) == 1 and box.due() == []
    assert [g.hash for g in box.reject(B, "invalid")] == [B]
    assert seqs(box.due()) == [2] and not box.deferred


def test_room_that_comes_back_is_shared_between_the_publishers_oldest_first() -> None:
    box = Mailbox(max_buffered=2)
    assert box.offer(B, P, 0, (A,), seq=1)[0] == BUFFERED
    assert box.offer(C, P, 0, (A,), seq=2)[0] == BUFFERED
    for seq in range(3, 13):
        assert box.offer(bytes([0x40 + seq]) * 32, P, 0, (X,), seq=seq) == (DEFERRED, [])
    assert box.offer(D, Q, 0, (X,), seq=20) == (DEFERRED, [])
    box.reject(B, "invalid")
    box.reject(C, "invalid")
    assert seqs(box.due()) == [3, 20]  # the flooding publisher's oldest, and the other's: one each


def test_an_honest_delivery_costs_nothing_for_messages_deferred_under_other_deps() -> None:
    """A flood of deferred messages naming ghosts must cost nothing per honest delivery."""
    box = Mailbox(max_per_publisher=1)
    assert box.offer(B, P, 0, (X,), seq=1)[0] == BUFFERED  # P's room: waits for a ghost
    for seq in range(2, 2002):
        assert box.offer(seq.to_bytes(32, "big"), P, 0, (b"\x01" + seq.to_bytes(31, "big"),), seq=seq)[0] == DEFERRED
    assert box.offer(C, P, 0, (A,), seq=3000) == (DEFERRED, [])  # waits for A
    assert box.offer(D, Q, 0, (), seq=3001)[0] == DELIVERED  # unrelated: nothing is due
    assert box.due() == []
    assert box.offer(A, Q, 0, (), seq=3002)[0] == DELIVERED  # what C waits for: C alone is due
    assert seqs(box.due()) == [3000] and len(box.deferred) == 2000


def test_closing_an_epoch_abandons_its_buffered_messages_and_forgets_it() -> None:
    g, h, k, m = (bytes([n]) * 32 for n in (0x61, 0x62, 0x63, 0x64))  # epoch 1's
    box = Mailbox()
    box.offer(A, P, 0, ())
    box.offer(C, P, 0, (B,))
    box.offer(X, P, 0, (A, B))
    box.reject(D, "invalid", 0)
    box.offer(g, P, 1, ())
    box.offer(k, Q, 1, (h,))
    box.offer(m, Q, 1, (g, E))
    box.reject(E, "invalid", 1)  # takes m with it
    assert box.rejected == {D: (0, "invalid"), E: (1, "invalid"), m: (1, "dep_rejected")}
    abandoned = box.close_epoch(0)
    assert sorted(e.hash for e in abandoned) == [C, X] and all(e.epoch == 0 for e in abandoned)
    assert list(box.buffered) == [k] and list(box.waiters) == [h] and box.waiting_for(h) == [box.buffered[k]]
    assert box.rejected == {E: (1, "invalid"), m: (1, "dep_rejected")}
    assert box.epochs() == [1] and box.frontier(0) == [] and box.frontier(1) == [g]
    assert not box.is_delivered(A, 0) and box.is_delivered(g, 1)
    assert box.per_publisher[P] == 0 and box.per_publisher[Q] == 1
    assert box.counts["abandoned"] == 2
    assert hashes(box.offer(h, P, 1, (g,))[1]) == [h, k]  # epoch 1 goes on


def test_a_loaded_history_counts_as_delivered() -> None:
    box = Mailbox()
    box.load(0, [A, B], heads=[B])
    assert box.offer(A, P, 0, ()) == (DUPLICATE, [])
    status, ready = box.offer(C, P, 0, (A, B))
    assert status == DELIVERED and hashes(ready) == [C]
    assert box.frontier(0) == [C]


def test_the_frontier_is_the_newest_heads_up_to_the_limit() -> None:
    box = Mailbox()
    for h in (A, B, C):
        box.offer(h, P, 0, ())
    box.offer(D, P, 0, (A,))
    assert box.frontier(0) == [B, C, D]
    assert box.frontier(0, limit=2) == [C, D]
    assert box.frontier(5) == []
