"""A bulk flush seals and books a run of bodies at once: the same as one by one, counters never reused."""

from __future__ import annotations

import os

import pytest

from flowcast.transport import crypto
from flowcast.transport.reliable import Link
from flowcast.transport.sender import ELICITING
from flowcast.transport.session import Session


def _twins(aegis: bool) -> tuple[Session, Session]:
    tx, rx = os.urandom(32), os.urandom(32)
    made = []
    for _ in range(2):
        made.append(Session(7, 9, tx, rx, Link(1_200, lambda *a: None), initiator=True, client_short=b"c" * 32, created=0.0, aegis=aegis))
    return made[0], made[1]


@pytest.mark.parametrize("aegis", [True, False])
def test_a_run_seals_as_one_by_one_would_and_every_datagram_opens(aegis):
    one, run = _twins(aegis)
    bodies = [os.urandom(n) for n in (0, 1, 100, 1_184, crypto.SCRATCH_SIZE, 70_000)]
    bodies.append(bytearray(b"a view's body"))  # not bytes: the general path
    singly = [one.seal(bytes(body) if isinstance(body, bytearray) else body) for body in bodies]
    first, datagrams = run.seal_run(bodies)
    assert first == 0 and run.counter == one.counter == len(bodies)
    assert datagrams == [datagram for _, datagram in singly]
    assert [counter for counter, _ in singly] == list(range(len(bodies)))
    for body, datagram in zip(bodies, datagrams):
        assert crypto.open_packet(run.tx_key, datagram, aegis) == bytes(body)


@pytest.mark.parametrize("aegis", [True, False])
def test_counters_are_taken_before_any_is_used(aegis):
    """An error midway leaves no counter that sealed a datagram free to seal another (nonce reuse)."""
    session, _ = _twins(aegis)
    with pytest.raises(TypeError):
        session.seal_run([b"first", 12345, b"third"])
    assert session.counter == 3
    counter, _ = session.seal(b"next")
    assert counter == 3


def test_sent_run_books_what_sent_would_for_each():
    one, run = Link(1_200, lambda *a: None), Link(1_200, lambda *a: None)
    bodies = [(b"x" * 1_000, ([1], [2])), (b"ping", ELICITING), (b"ack only", None), (b"y" * 1_184, ([3], []))]
    for offset, (body, chunks) in enumerate(bodies):
        one.sent(40 + offset, len(body), chunks, 2.5)
    run.sent_run(40, bodies, 2.5)
    assert run.inflight == one.inflight and 42 not in run.inflight
    assert run.inflight_bytes == one.inflight_bytes == 1_000 + 4 + 1_184
    assert run.last_counter == one.last_counter == 43
    lane_one, lane_run = Link(1_200, lambda *a: None, acks=False), Link(1_200, lambda *a: None, acks=False)
    for offset, (body, chunks) in enumerate(bodies):
        lane_one.sent(40 + offset, len(body), chunks, 2.5)
    lane_run.sent_run(40, bodies, 2.5)
    assert not lane_run.inflight and lane_run.inflight_bytes == 0 and lane_run.last_counter == lane_one.last_counter == 43
