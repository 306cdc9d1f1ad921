"""RoadStack over real loopback UDP, run as micro-threads of a real-clock scheduler."""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable

from flowcast.runtime import RealClock, Scheduler
from flowcast.transport.keep import Keep
from flowcast.transport.ports import UdpPort
from flowcast.transport.road import RoadStack
from flowcast.transport.stack import RECEIVE_BATCH, serve

from .roadkit import udp_road_pair

_SO_MEMINFO = 55  # Linux's <asm-generic/socket.h>; Python's socket module does not name it


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
    beta.hooks.add("message", got.append)
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


def _wait_queued(sock: socket.socket, enough: Callable[[int], bool], timeout: float = 2.0) -> int:
    """Wait, bounded, until the bytes the kernel holds for ``sock`` are
    ``enough``; return them.  Linux's SO_MEMINFO counts queued datagrams by
    their buffer size, so equal datagrams can be counted without reading
    one (a read would be the very thing under test)."""
    deadline = time.monotonic() + timeout
    while True:
        held = struct.unpack_from("I", sock.getsockopt(socket.SOL_SOCKET, _SO_MEMINFO, 36))[0]
        if enough(held):
            return held
        assert time.monotonic() < deadline, f"only {held} bytes queued after {timeout} s"
        time.sleep(0.001)  # a bounded poll of the condition above


def test_sparse_reads_take_one_datagram_and_leave_the_rest_readable():
    """A service long after the last read takes one datagram (no read that
    finds the socket empty); the rest stay readable and the next, prompt,
    service drains them in a batch."""
    alpha, beta = udp_road_pair()
    try:
        limits = []
        real = beta.port.receive_many

        def spy(limit):
            got = real(limit)
            limits.append((limit, len(got)))
            return got

        beta.port.receive_many = spy
        alpha.send({"n": 0}, "beta", reliable=False)
        alpha.flush()  # one datagram each
        one = _wait_queued(beta.port._sock, lambda held: held > 0)
        for i in (1, 2):
            alpha.send({"n": i}, "beta", reliable=False)
            alpha.flush()
        _wait_queued(beta.port._sock, lambda held: held >= 3 * one)  # the same size: all three are in
        beta._last_read = -1.0  # long ago: the next read is sparse
        beta.service()
        assert limits == [(1, 1)]
        assert select.select([beta.port.fileno()], [], [], 0)[0]  # the rest wake the caller at once
        beta.service()
        assert limits[1] == (RECEIVE_BATCH, 2)
        assert [m.data["n"] for m in beta.receive_many()] == [0, 1, 2]
        # an echo still works both ways, one datagram per wake
        alpha._last_read = beta._last_read = -1.0
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
