"""What a batch read the quick way (roadreceive.py) owes goes with the flush that ends the batch:
the ACKs its datagrams make owed, and the answers to challenges among them (both found by an outside
review of the quick path; the first failed before the fix)."""

from __future__ import annotations

from flowcast.transport.wire import PacketKind

from .roadkit import World


def _hold(world: World, source: str, destination: str):
    """Keep ``source``'s sealed datagrams to ``destination`` instead of delivering them; returns
    (held, release) where ``release()`` puts every held datagram in the receiver's queue at once."""
    held: list[bytes] = []
    holding = [True]
    original = world.net._send

    def tapped(data, src, dst):
        if holding[0] and src == source and dst == destination and data[1] == PacketKind.SEALED:
            held.append(bytes(data))
            return
        original(data, src, dst)

    world.net._send = tapped

    def release() -> None:
        holding[0] = False
        port = world.net._ports[destination]
        for data in held:
            assert port._enqueue(data, source)

    return held, release


def test_an_ack_owed_after_a_listener_flushed_mid_batch_still_goes_at_the_end_of_the_batch():
    """Promise: what a batch makes owed (an ACK) goes out when the batch is done, whatever a listener did.

    A message listener that answers a request and calls ``flush()`` (the documented way for a
    plain-Python caller to get a message out) empties the stack's flush queue in the middle of the
    batch.  The full path (``_authentic``) put the remote back in it for every later datagram; the
    quick path does not, so the ACK the later datagrams make owed is sent by nobody: ``ack_owed``
    has no deadline of its own (Recovery.next_deadline counts on the flush queue), and the sender,
    on a lossless network, times its packets out and resends them."""
    world = World(seed=31, delay=0.001)
    alpha, beta = world.pair()
    world.run_for(0.1)
    held, release = _hold(world, "alpha", "beta")
    outs = []
    for data, stream in ((b"note0", 2), (b"request", 1), (b"note1", 2), (b"note2", 2)):
        outs.append(alpha.send_bytes(data, "beta", stream=stream))
        world.run_for(0.0005)  # one datagram each
    assert len(held) == 4

    def on_message(message):
        if message.stream == 1:
            beta.flush()  # e.g. after sending the reply

    beta.hooks.add("message", on_message)
    link = alpha.remote("beta").session.link
    before = link.counts["lost_packets"]
    release()  # all four arrive together: one read
    assert world.run_until(lambda: all(o.state == "delivered" for o in outs), 0.02, step=0.001), [o.state for o in outs]
    assert link.counts["lost_packets"] == before


def test_a_path_challenge_read_on_the_quick_path_is_answered_with_the_batch():
    """Promise: an authentic PATH_CHALLENGE is answered, wherever in a batch it comes.

    The quick path hands the challenge to the link (``on_path`` reads ``_source``, which it sets)
    and counts on the first datagram of the run having put the remote in the flush queue; the
    answer must leave with the flush that ends the batch, from the same session."""
    from flowcast.transport.crypto import open_packet
    from flowcast.transport.wire import PATH, ChunkKind

    world = World(seed=32, delay=0.001)
    alpha, beta = world.pair()
    world.run_for(0.1)
    held, release = _hold(world, "alpha", "beta")
    alpha.send_bytes(b"m0", "beta")
    world.run_for(0.0005)
    token = 0x1234_5678_9ABC_DEF0
    session = alpha.remote("beta").session
    body = PATH.pack(ChunkKind.PATH_CHALLENGE, 0, token)
    counter, datagram = session.seal(body)
    session.link.sent(counter, len(body), None, world.scheduler.clock.now())
    world.net._send(datagram, "alpha", "beta")
    alpha.send_bytes(b"m1", "beta")
    world.run_for(0.0005)
    assert len(held) == 3
    answers = []
    original = world.net._send

    def tap(data, src, dst):
        if src == "beta" and dst == "alpha" and data[1] == PacketKind.SEALED and len(data) > 32:
            try:
                opened = open_packet(session.rx_key, data, session.aegis)
            except Exception:  # noqa: BLE001 - not this session's
                opened = b""
            if bytes(PATH.pack(ChunkKind.PATH_RESPONSE, 0, token)) in bytes(opened):
                answers.append(data)
        original(data, src, dst)

    world.net._send = tap
    release()
    world.run_for(0.005)
    assert len(answers) == 1
    assert [m.data for m in beta.receive_many()] == [b"m0", b"m1"]
