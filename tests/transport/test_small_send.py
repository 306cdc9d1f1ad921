"""The small-message send path (Sender.submit_small) keeps every promise of the general one."""

from __future__ import annotations

import pytest

from tests.transport.roadkit import World, udp_road_pair


def test_small_and_segmented_messages_of_one_stream_keep_their_order_and_numbers():
    world = World(seed=3)
    alpha, beta = world.pair()
    sizes = [10, 200_000, 20, 30, 150_000, 1]
    outs = [alpha.send_bytes(bytes([i]) * n, "beta", stream=7) for i, n in enumerate(sizes)]
    assert [o.seq for o in outs] == list(range(len(sizes)))
    assert world.run_until(lambda: all(o.state == "delivered" for o in outs), 20)
    got = beta.receive_many()
    assert [(m.stream, len(m.data), m.data[:1]) for m in got] == [(7, n, bytes([i])) for i, n in enumerate(sizes)]


def test_a_small_message_gets_its_deadline():
    world = World(seed=4)
    alpha, beta = world.pair()
    out = alpha.send_bytes(b"x", "beta", timeout=0.5)
    assert out.deadline == pytest.approx(world.scheduler.clock.now() + 0.5)
    no_deadline = alpha.send_bytes(b"y", "beta", timeout=None)
    assert no_deadline.deadline is None


def test_a_listener_hears_small_messages_and_limits_still_hold():
    world = World(seed=5)
    alpha, beta = world.pair()
    heard = []
    alpha.hooks.add("submitted", lambda msg, to: heard.append((msg.data, to)))
    alpha.send_bytes(b"a", "beta")
    assert heard == [(b"a", "beta")]
    with pytest.raises(KeyError):
        alpha.send_bytes(b"a", "nobody")
    with pytest.raises(ValueError, match="stream"):
        alpha.send_bytes(b"a", "beta", stream=70_000)
    alpha.close()
    with pytest.raises(Exception, match="closed"):
        alpha.send_bytes(b"a", "beta")


def test_a_message_over_the_stacks_limit_is_refused_though_it_would_go_whole():
    world = World(seed=6)
    alpha, beta = world.pair(max_message=100)
    with pytest.raises(ValueError, match="exceeds the 100-byte limit"):
        alpha.send_bytes(b"z" * 101, "beta")
    assert alpha.send_bytes(b"z" * 100, "beta").seq == 0


def test_a_payload_or_timeout_that_cannot_be_sent_leaves_the_books_as_they_were():
    world = World(seed=7)
    alpha, beta = world.pair()
    with pytest.raises(TypeError):
        alpha.send_bytes("not bytes", "beta")
    with pytest.raises(TypeError):
        alpha.send_bytes(b"x", "beta", timeout="soon")
    link = alpha.remote("beta").session.link
    assert link.pending_count == 0 and not link.next_seq.get(0)
    out = alpha.send_bytes(b"ok", "beta")
    assert out.seq == 0
    assert world.run_until(lambda: out.state == "delivered", 10)
    assert [m.data for m in beta.receive_many()] == [b"ok"]


def test_a_buffer_changed_after_send_does_not_change_what_arrives():
    """A whole message is packed only when its packet is built, so send copies a mutable payload."""
    world = World(seed=8)
    alpha, beta = world.pair()
    payload = bytearray(b"before")
    out = alpha.send_bytes(payload, "beta")
    payload[:] = b"AFTER!"
    assert world.run_until(lambda: out.state == "delivered", 10)
    assert [m.data for m in beta.receive_many()] == [b"before"]


def test_a_payload_that_is_no_buffer_is_refused_before_any_books_on_the_general_path():
    world = World(seed=9)
    alpha, beta = world.pair()
    link = alpha.remote("beta").session.link
    for bad in ("text", 5, None):
        with pytest.raises(TypeError):
            alpha.send_bytes(bad, "beta", retries=3)  # retries: the general path
    assert link.pending_count == 0 and not link.next_seq.get(0) and not link.fresh


def test_a_whole_message_goes_out_exactly_retries_plus_one_times():
    world = World(seed=10, delay=0.001)
    alpha, beta = world.pair()
    carried = []
    original = world.net._send

    def count(data, source, destination):
        if source == "alpha" and len(data) > 200:  # datagrams big enough to hold the message
            carried.append(len(data))
        original(data, source, destination)

    world.net._send = count
    world.net.link("alpha", "beta", both=False, loss=1.0)
    doomed = alpha.send_bytes(b"m" * 200, "beta", timeout=None, retries=2)
    assert world.run_until(lambda: doomed.done, 30)
    assert doomed.state == "failed" and doomed.reason == "retries exhausted"
    assert len(carried) == 3


def test_a_responder_sends_a_large_message_before_the_initiator_is_heard_in_its_session():
    """Segments fill a whole body, so the ALLOW_ACK a responder repeats until the initiator is heard
    goes once per flush: put before every body it would leave room for no segment, and a flush
    would build control-only bodies for ever (it did: memory grew without bound)."""
    world = World(seed=11, delay=0.01)
    alpha = world.estate("alpha")
    beta = world.estate("beta")
    carried = [0]
    original = world.net._send

    def bounded(data, source, destination):
        carried[0] += 1
        if carried[0] > 5_000:  # 200 KB needs ~170 datagrams: a flush that never ends fails here
            raise RuntimeError("a flush that does not end")
        original(data, source, destination)

    world.net._send = bounded
    alpha.join("beta")

    def answered() -> bool:
        remote = beta.remotes and next(iter(beta.remotes.values()))
        return bool(remote) and remote.session is not None and remote.session.remote_index is not None

    assert world.run_until(answered, 5, step=0.001)
    session = next(iter(beta.remotes.values())).session
    assert not session.confirmed and not session.initiator  # alpha's first sealed packet is on its way
    out = beta.send_bytes(b"z" * 200_000, "alpha")
    assert world.run_until(lambda: out.state == "delivered", 10)
    assert [len(m.data) for m in alpha.receive_many()] == [200_000]
    assert carried[0] < 5_000


def test_on_a_real_clock_a_small_message_is_timed_from_when_it_was_sent():
    """The small path reads a RealClock inline (time.monotonic() - origin): the same time as now()."""
    from flowcast.transport.stack import serve

    alpha, beta = udp_road_pair()
    try:
        before = alpha.clock.now()
        out = alpha.send_bytes(b"t", "beta", timeout=30.0)
        after = alpha.clock.now()
        assert out.seq == 0 and before + 30.0 <= out.deadline <= after + 30.0
        assert serve([alpha, beta], until=lambda: out.state == "delivered", timeout=5)
    finally:
        alpha.close()
        beta.close()


@pytest.mark.parametrize("cwnd, burst", [(1 << 20, 0), (5_000, 0), (1 << 20, 3), (1, 0)])
def test_a_run_of_segments_is_what_build_would_have_made_one_by_one(cwnd, burst):
    """Sender.next_segments checks the window by arithmetic for a whole run; the bodies, the books and
    where it stops must be those of build() called before each packet, as the road did."""
    from flowcast.transport.reliable import Link, Outgoing

    def link() -> Link:
        made = Link(1200, lambda *a: None)
        made.cwnd = cwnd
        made.submit(Outgoing(bytes(range(256)) * 100, 3, burst=burst), 0.0)
        return made

    runner, builder = link(), link()
    run = runner.next_segments(64)
    for counter, (body, carried) in enumerate(run):
        runner.sent(counter, len(body), carried, 0.0)
    built = []
    head = builder.fresh[0]
    while builder.can_send() and len(built) < 64 and head.next_seg + 1 < head.nseg:  # a run never takes the last
        one = builder.build()
        if one is None:
            break
        builder.sent(len(built), len(one[0]), one[1], 0.0)
        built.append(one[0])
    assert [body for body, _ in run] == built
    assert runner.inflight_bytes == builder.inflight_bytes and sorted(runner.inflight) == sorted(builder.inflight)
    head_r, head_b = runner.fresh[0], builder.fresh[0]
    assert (head_r.next_seg, head_r.inflight, bytes(head_r.marks)) == (head_b.next_seg, head_b.inflight, bytes(head_b.marks))
