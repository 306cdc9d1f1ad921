"""RoadStack over real loopback UDP, run as micro-threads of a real-clock scheduler."""

from __future__ import annotations

import select
import time

from flowcast.runtime import RealClock, Scheduler
from flowcast.transport.keep import Keep
from flowcast.transport.ports import UdpPort
from flowcast.transport.road import RoadStack
from flowcast.transport.stack import RECEIVE_BATCH, serve


def test_two_estates_as_micro_threads_on_loopback():
    scheduler = Scheduler(RealClock())
    scheduler.enable_wakeup()
    stacks = []
    for name in ("alpha", "beta"):
        keep = Keep(None)
        keep.ensure_local(name)
        stacks.append(RoadStack(UdpPort("127.0.0.1", 0, scheduler=scheduler), keep, policy="always", scheduler=scheduler))
    alpha, beta = stacks
    got = []
    beta.on_message = got.append
    outs = []

    def app():
        alpha.join(beta.address)
        while not alpha.is_allowed("beta") and scheduler.clock.now() < 5:
            yield
        for i in range(3000):
            outs.append(alpha.send({"n": i}, "beta"))
            if i % 500 == 0:
                yield
        while not (len(got) == 3000 and all(o.delivered for o in outs)) and scheduler.clock.now() < 10:
            yield
        scheduler.stop()

    scheduler.spawn(app())
    scheduler.run(until=10)
    for stack in stacks:
        stack.close()
    scheduler.close()
    assert [m.data["n"] for m in got] == list(range(3000))
    assert all(o.delivered for o in outs)


def _udp_pair():
    stacks = []
    for name in ("alpha", "beta"):
        keep = Keep(None)
        keep.ensure_local(name)
        stacks.append(RoadStack(UdpPort("127.0.0.1", 0), keep, policy="always"))
    alpha, beta = stacks
    alpha.join(beta.address)
    assert serve(stacks, until=lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), timeout=5)
    return alpha, beta


def test_sparse_reads_take_one_datagram_and_leave_the_rest_readable():
    """A service long after the last read takes one datagram (no read that
    finds the socket empty); the rest stay readable and the next, prompt,
    service drains them in a batch."""
    alpha, beta = _udp_pair()
    try:
        limits = []
        real = beta.port.receive_many

        def spy(limit):
            got = real(limit)
            limits.append((limit, len(got)))
            return got

        beta.port.receive_many = spy
        for i in range(3):
            alpha.send({"n": i}, "beta", reliable=False)
            alpha.flush()  # one datagram each
        time.sleep(0.05)
        beta._last_read = -1.0  # long ago: the next read is sparse
        beta.service()
        assert limits == [(1, 1)]
        assert select.select([beta.port.fileno()], [], [], 0)[0]  # the rest wake the caller at once
        beta.service()
        assert limits[1] == (RECEIVE_BATCH, 2)
        assert [m.data["n"] for m in beta.receive_many()] == [0, 1, 2]
        # an echo still works both ways, one datagram per wake
        time.sleep(0.01)
        for i in range(20):
            alpha.send_bytes(b"x" * 100, "beta")
            alpha.flush()
            assert serve([beta], until=lambda: bool(beta.inbox), timeout=2)
            for message in beta.receive_many():
                beta.send_bytes(message.data, "alpha")
            beta.flush()
            assert serve([alpha], until=lambda: bool(alpha.inbox), timeout=2)
            assert alpha.receive().data == b"x" * 100
    finally:
        alpha.close()
        beta.close()
