"""A message ends once: the state machine in outgoing.py refuses a second final state."""

from __future__ import annotations

import pytest

import flowcast
from flowcast.transport.outgoing import Outgoing, OutgoingStateError
from flowcast.transport.reliable import Link


def test_a_new_message_is_pending():
    msg = Outgoing(b"x")
    assert (msg.state, msg.pending, msg.done, msg.reason) == ("queued", True, False, "")
    assert not (msg.delivered or msg.failed or msg.sent)


@pytest.mark.parametrize(
    "move, state",
    [(Outgoing.deliver, "delivered"), (Outgoing.mark_sent, "sent"), (lambda m: m.fail("timeout"), "failed")],
)
def test_each_final_state_is_final(move, state):
    msg = Outgoing(b"x")
    move(msg)
    assert msg.state == state and msg.done and not msg.pending
    for again in (Outgoing.deliver, Outgoing.mark_sent, lambda m: m.fail("late")):
        with pytest.raises(OutgoingStateError, match=f"already {state}"):
            again(msg)
    assert msg.state == state  # a refused transition changes nothing
    assert msg.reason == ("timeout" if state == "failed" else "")


def test_the_error_is_a_flowcast_error_and_a_runtime_error():
    assert issubclass(OutgoingStateError, flowcast.Error)
    assert issubclass(OutgoingStateError, RuntimeError)


def test_state_and_reason_are_read_only():
    msg = Outgoing(b"x")
    with pytest.raises(AttributeError):
        msg.reason = "made up"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        msg.failed = True  # type: ignore[misc]


def _pair():
    """Two acknowledging links wired body to body, and what each delivered."""
    done: list[Outgoing] = []
    got: list[bytes] = []
    a = Link(1200, lambda *x: None, done.append)
    b = Link(1200, lambda stream, flags, data: got.append(bytes(data)))
    return a, b, done, got


def _exchange(a: Link, b: Link, counter: list[int], now: float) -> None:
    """Every body a builds goes to b, and b's ACK back to a."""
    while (built := a.build()) is not None:
        counter[0] += 1
        a.sent(counter[0], len(built[0]), built[1], now)
        b.handle(built[0], now)
        b.received(counter[0])
    b.ack_owed = True
    while (back := b.build()) is not None:
        a.handle(back[0], now)


def test_a_delivered_message_never_fails_later():
    a, b, done, got = _pair()
    msg = a.submit(Outgoing(b"hello"), 0.0)
    _exchange(a, b, [0], 0.0)
    assert msg.delivered and got == [b"hello"] and done == [msg]
    a.fail(msg, "timeout")  # too late: nothing changes, nobody hears twice
    assert msg.delivered and msg.reason == "" and done == [msg]
    assert a.counts["failed"] == 0


def test_a_failed_message_is_not_reported_delivered_by_a_late_ack():
    a, b, done, got = _pair()
    msg = a.submit(Outgoing(b"hello", timeout=0.1), 0.0)
    built = a.build()
    a.sent(1, len(built[0]), built[1], 0.0)
    a.poll(0.2)  # its deadline passes before any ACK
    assert msg.failed and msg.reason == "timeout" and done == [msg]
    b.handle(built[0], 0.2)
    b.received(1)
    b.ack_owed = True
    a.handle(b.build()[0], 0.2)
    assert msg.failed and done == [msg]


def test_a_final_message_cannot_be_sent_again():
    a, b, done, got = _pair()
    msg = a.submit(Outgoing(b"hello"), 0.0)
    _exchange(a, b, [0], 0.0)
    assert msg.delivered
    with pytest.raises(OutgoingStateError, match="again"):
        a.submit(msg, 0.0)
    assert msg.delivered and a.pending_count == 0


def _state_uses() -> list[tuple[str, str, int]]:
    """(module, "write" or "read", line) of every ``x._state`` under flowcast/."""
    import ast
    from pathlib import Path

    root = Path(flowcast.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "_state":
                kind = "read" if isinstance(node.ctx, ast.Load) else "write"
                found.append((path.relative_to(root).as_posix(), kind, node.lineno))
    return found


def test_only_outgoing_writes_the_state_and_only_the_sender_reads_it_besides():
    uses = _state_uses()
    assert {m for m, kind, _ in uses if kind == "write"} == {"transport/outgoing.py"}
    readers = {m for m, kind, _ in uses if kind == "read"}
    sending = {"transport/outgoing.py", "transport/sender.py", "transport/packing.py"}  # packing.py: the sender's bodies
    assert readers <= sending, sorted(u for u in uses if u[0] in readers - sending)


def test_deliver_through_settles_a_run_by_its_numbers_and_walks_a_queue_that_is_not_in_a_row():
    from collections import deque

    from flowcast.transport.outgoing import deliver_through

    def queue_of(seqs, failed=(), skips=()):
        out = deque()
        for seq in seqs:
            msg = Outgoing(b"x")
            msg.seq = seq
            if seq in failed:
                msg.fail("timeout")
            msg.skip = seq in skips
            out.append(msg)
        return out

    heard: list = []
    in_row = queue_of(range(10, 20), failed={12}, skips={13})
    assert deliver_through(in_row, 15, heard.append) == 4  # 10, 11, 13 (a skip: not heard), 14; 12 had failed
    assert [m.seq for m in heard] == [10, 11, 14] and [m.seq for m in in_row] == list(range(15, 20))
    assert deliver_through(in_row, 100, None) == 5 and not in_row  # past the end: all of it
    assert deliver_through(in_row, 100, None) == 0
    gappy = queue_of([1, 2, 5, 6, 9])  # never made by a link, but never mis-settled either
    assert deliver_through(gappy, 6, None) == 3 and [m.seq for m in gappy] == [6, 9]
    assert deliver_through(gappy, 6, None) == 0


def test_numbered_makes_what_the_constructor_makes_with_its_number_and_deadline():
    """``outgoing.numbered`` repeats ``Outgoing.__init__`` without the call (~0.05 us of a 100-byte
    message's ~1.3): a slot set in one and not the other would show here."""
    from flowcast.transport.outgoing import numbered

    made = Outgoing(b"payload", 7, 0x02, 12.5, None, 0, "beta")
    made.seq, made.deadline = 41, 99.0
    quick = numbered(b"payload", 7, 0x02, 12.5, "beta", 41, 99.0)

    def slots(msg):
        return {name: getattr(msg, name) for name in Outgoing.__slots__ if hasattr(msg, name)}

    assert slots(quick) == slots(made)
    assert quick.state == made.state and quick.pending
