"""Real socket ports: UDP and Unix datagrams on loopback and temp dirs."""

from __future__ import annotations

import errno
import os
import select
import socket
import stat

import pytest

from flowcast.runtime import RealClock, Scheduler
from flowcast.transport.ports import _socket as socket_port
from flowcast.transport.ports import (
    UDP_MAX_IPV4,
    SocketInUse,
    UdpPort,
    UxdPort,
    uxd_address,
)


@pytest.fixture
def udp_pair():
    a, b = UdpPort(), UdpPort()
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def rundir(tmp_path):
    # Short: sun_path holds 107 bytes and pytest's tmp paths can be long.
    import tempfile

    path = tempfile.mkdtemp(prefix="fc-")
    yield path
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)


def drain(port, want, *, rounds=10_000):
    """Receive until ``want`` datagrams arrived; bounded."""
    got = []
    for _ in range(rounds):
        got.extend(port.receive_many(want - len(got)))
        if len(got) >= want:
            return got
        select.select([port], [], [], 1.0)
    raise AssertionError(f"only {len(got)} of {want} datagrams arrived")


# -- UDP ---------------------------------------------------------------------


def test_udp_round_trip_reports_sender_address(udp_pair):
    a, b = udp_pair
    assert a.address[0] == "127.0.0.1" and a.address[1] > 0
    assert b.receive() is None
    assert a.send(b"hello", b.address) is True
    data, source = drain(b, 1)[0]
    assert data == b"hello"
    assert source == a.address
    assert b.send(b"back", source)
    assert drain(a, 1)[0] == (b"back", b.address)


def test_udp_receive_many_respects_limit_and_order(udp_pair):
    a, b = udp_pair
    for i in range(50):
        assert a.send(i.to_bytes(2, "big"), b.address)
    first = drain(b, 20)
    assert len(first) == 20
    rest = drain(b, 30)
    assert [int.from_bytes(d, "big") for d, _ in first + rest] == list(range(50))
    assert b.receive_many(10) == []
    assert b.counts["received"] == 50 and a.counts["sent"] == 50


def test_udp_largest_datagram_passes_and_larger_raises(udp_pair):
    a, b = udp_pair
    assert a.max_datagram == UDP_MAX_IPV4 == 65507
    big = os.urandom(UDP_MAX_IPV4)
    assert a.send(big, b.address)
    assert drain(b, 1)[0][0] == big
    with pytest.raises(ValueError):
        a.send(big + b"x", b.address)


def test_udp_buffers_are_raised_beyond_the_default():
    with UdpPort() as port:
        assert port.receive_buffer > 212_992
        assert port.send_buffer > 212_992


def test_udp_counts_what_the_kernel_dropped_for_a_full_buffer(udp_pair):
    a, _ = udp_pair
    with UdpPort(buffer_size=4096) as small:
        assert small.kernel_drops() == 0
        for _ in range(100):
            assert a.send(b"x" * 1000, small.address)
        kept = len(small.receive_many(1000))
        assert 0 < kept < 100
        assert small.kernel_drops() == 100 - kept  # loopback delivers inside sendto


def test_udp_send_to_nobody_is_not_an_error(udp_pair):
    a, b = udp_pair
    dead = UdpPort()
    gone = dead.address
    dead.close()
    for _ in range(3):
        assert a.send(b"x", gone) is True
    # Any ICMP error that comes back must not break later traffic.
    assert a.send(b"still", b.address)
    assert drain(b, 1)[0][0] == b"still"
    assert a.receive_many(5) == []


def test_udp_ipv6_loopback():
    try:
        probe = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        # No IPv6 here (some containers): the port must say so cleanly.
        with pytest.raises(OSError):
            UdpPort("::1")
        return
    with UdpPort("::1") as a, UdpPort("::1") as b:
        assert a.max_datagram == 65527
        assert a.send(b"six", b.address)
        data, source = drain(b, 1)[0]
        assert data == b"six" and source[:2] == a.address[:2]


def test_on_readable_drives_a_scheduler_and_can_be_removed(udp_pair):
    a, b = udp_pair
    scheduler = Scheduler(RealClock())
    port = UdpPort(scheduler=scheduler)
    got = []

    def readable():
        got.extend(port.receive_many(64))
        if len(got) >= 100:
            scheduler.stop()

    port.on_readable(readable)
    for i in range(100):
        assert a.send(b"%d" % i, port.address)
    scheduler.run(until=5.0)
    assert [d for d, _ in got] == [b"%d" % i for i in range(100)]
    port.on_readable(None)
    port.close()
    # Nothing registered any more: the scheduler has nothing left to wait for.
    start = scheduler.clock.now()
    scheduler.run(until=start + 5.0)
    assert scheduler.clock.now() - start < 1.0
    scheduler.close()


def chunks(data, size):
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("gso", [True, False])
@pytest.mark.parametrize("gro", [True, False])
def test_udp_send_segments_arrive_as_separate_datagrams_in_order(gso, gro):
    with UdpPort() as tx, UdpPort(gro=gro) as rx:
        assert tx.gso  # Linux loopback segments
        assert rx.gro == gro
        tx._gso = gso  # False: the one-send-each path every port has
        data = os.urandom(1200 * 7 + 345)
        assert tx.send_segments(data, 1200, rx.address) == 8
        got = drain(rx, 8)
        assert [d for d, _ in got] == chunks(data, 1200)
        assert {source for _, source in got} == {tx.address}
        assert tx.counts["sent"] == 8 and rx.counts["received"] == 8
        assert rx.receive() is None


def test_udp_send_segments_beyond_one_kernel_run():
    # More than 64 segments and more than one IP datagram's worth of bytes.
    with UdpPort() as tx, UdpPort(gro=True) as rx:
        data = os.urandom(1000 * 200)
        assert tx.send_segments(data, 1000, rx.address) == 200
        assert [d for d, _ in drain(rx, 200)] == chunks(data, 1000)


def test_gro_receiver_keeps_order_across_small_limits_and_single_datagrams():
    with UdpPort() as tx, UdpPort(gro=True) as rx:
        data = os.urandom(500 * 10)
        assert tx.send(b"single one", rx.address)
        assert tx.send_segments(data, 500, rx.address) == 10
        assert tx.send(b"x" * 7000, rx.address)
        got = []
        for _ in range(100):
            batch = rx.receive_many(3)
            assert len(batch) <= 3
            got.extend(d for d, _ in batch)
            if len(got) == 12:
                break
            if not batch:
                select.select([rx], [], [], 1.0)
        assert got == [b"single one", *chunks(data, 500), b"x" * 7000]


def test_gso_refused_by_the_path_falls_back_for_good():
    class Refusing:
        """A socket whose sendmsg fails as on a device without checksum offload."""

        def __init__(self, sock):
            self._sock = sock

        def sendmsg(self, *args):
            raise OSError(errno.EIO, "no offload")

        def __getattr__(self, name):
            return getattr(self._sock, name)

    with UdpPort() as tx, UdpPort() as rx:
        real = tx._sock
        tx._sock = Refusing(real)
        try:
            data = os.urandom(3000)
            assert tx.send_segments(data, 1000, rx.address) == 3
            assert not tx.gso
            assert [d for d, _ in drain(rx, 3)] == chunks(data, 1000)
        finally:
            tx._sock = real


def test_send_segments_refuses_bad_sizes(udp_pair):
    a, b = udp_pair
    for size in (0, -1, 65508):
        with pytest.raises(ValueError):
            a.send_segments(b"x" * 10, size, b.address)


def test_callbacks_without_scheduler_say_what_to_do(udp_pair):
    a, _ = udp_pair
    a.on_readable(None)
    a.on_writable(None)
    with pytest.raises(RuntimeError, match="fileno"):
        a.on_readable(lambda: None)
    with pytest.raises(RuntimeError, match="writable_fileno"):
        a.on_writable(lambda: None)
    assert select.select([], [a.writable_fileno()], [], 0)[1]


def test_udp_on_writable_fires_once():
    scheduler = Scheduler(RealClock())
    port = UdpPort(scheduler=scheduler)
    fired = []
    port.on_writable(lambda: fired.append(scheduler.clock.now()))
    scheduler.run(until=2.0)
    assert len(fired) == 1  # one-shot, and an idle UDP socket is writable
    port.on_writable(lambda: fired.append("again"))
    port.on_writable(None)  # withdrawn before it ran
    scheduler.run(until=scheduler.clock.now() + 0.05)
    assert len(fired) == 1
    port.close()
    scheduler.close()


def test_closed_port_refuses_use_and_close_is_idempotent(udp_pair):
    a, b = udp_pair
    a.close()
    a.close()
    assert a.closed
    with pytest.raises(OSError):
        a.send(b"x", b.address)


# -- Unix datagrams ------------------------------------------------------------


def test_uxd_socket_file_is_private_and_removed_on_close(rundir):
    port = UxdPort(rundir, "yard1")
    path = os.path.join(rundir, "yard1")
    assert port.address == port.path == path
    mode = os.lstat(path).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    port.close()
    assert not os.path.exists(path)


def test_uxd_creates_missing_runtime_dir_private(rundir):
    inner = os.path.join(rundir, "run")
    with UxdPort(inner, "y"):
        assert stat.S_IMODE(os.stat(inner).st_mode) == 0o700
    os.rmdir(inner)


def test_uxd_round_trip_and_reply(rundir):
    with UxdPort(rundir, "a") as a, UxdPort(rundir, "b") as b:
        assert a.send(b"ping", b.address)
        data, source = drain(b, 1)[0]
        assert (data, source) == (b"ping", a.address)
        assert b.send(b"pong", source)
        assert drain(a, 1)[0] == (b"pong", b.address)


def test_uxd_refuses_a_live_socket_and_cleans_a_stale_one(rundir):
    live = UxdPort(rundir, "x")
    with pytest.raises(SocketInUse):
        UxdPort(rundir, "x")
    assert live.send(b"still mine", live.address)  # untouched by the attempt
    assert drain(live, 1)[0][0] == b"still mine"
    live.close()

    # A process that died leaves its file behind: a bound, closed socket.
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(os.path.join(rundir, "x"))
    dead.close()
    assert os.path.exists(os.path.join(rundir, "x"))
    with UxdPort(rundir, "x") as again:
        assert again.send(b"new", again.address)
        assert drain(again, 1)[0][0] == b"new"


def test_uxd_refuses_to_replace_a_regular_file(rundir):
    path = os.path.join(rundir, "f")
    with open(path, "w") as handle:
        handle.write("precious")
    with pytest.raises(FileExistsError):
        UxdPort(rundir, "f")
    with open(path) as handle:
        assert handle.read() == "precious"


def test_uxd_close_leaves_a_successor_socket_alone(rundir):
    first = UxdPort(rundir, "s")
    os.unlink(first.path)  # someone cleaned up under us...
    second = UxdPort(rundir, "s")  # ...and a new owner bound the path
    first.close()
    assert os.path.exists(second.path)
    second.close()
    assert not os.path.exists(second.path)


@pytest.mark.parametrize("name", ["", "..", ".hidden", "a/b", "../x", "a b", "x\0y", "tab\t", "é", "n" * 65])
def test_uxd_names_that_could_escape_or_confuse_are_refused(rundir, name):
    with pytest.raises(ValueError):
        uxd_address(rundir, name)
    with pytest.raises(ValueError):
        UxdPort(rundir, name)
    assert os.listdir(rundir) == []


def test_uxd_path_too_long_for_sun_path_is_refused(rundir):
    deep = os.path.join(rundir, "d" * 100)
    with pytest.raises(ValueError, match="107"):
        UxdPort(deep, "yard")


def test_uxd_full_peer_queue_returns_false_and_keeps_every_datagram(rundir):
    with UxdPort(rundir, "tx") as tx, UxdPort(rundir, "rx") as rx:
        accepted = []
        for i in range(5000):
            if tx.send(b"%04d" % i, rx.address):
                accepted.append(b"%04d" % i)
            else:
                break
        assert 0 < len(accepted) < 5000  # the Unix queue (10 here) filled up
        assert tx.counts["again"] == 1
        watch = tx.writable_fileno()
        assert tx.writable_fileno() == watch  # asking again watches the same peer
        assert not select.select([], [watch], [], 0)[1]  # honest: still full
        assert rx.receive() == (accepted[0], tx.address)
        assert select.select([], [watch], [], 1.0)[1]  # room again
        assert tx.send(b"late", rx.address)
        got = drain(rx, len(accepted))
        assert [d for d, _ in got] == accepted[1:] + [b"late"]


@pytest.mark.parametrize("how", ["epoll", "polling"])
def test_uxd_on_writable_moves_a_backlog_through_a_tiny_queue(rundir, how, monkeypatch):
    if how == "polling":  # what happens where there is no epoll
        monkeypatch.setattr(socket_port, "_HAVE_EPOLL", False)
    scheduler = Scheduler(RealClock())
    tx = UxdPort(rundir, "tx", scheduler=scheduler)
    rx = UxdPort(rundir, "rx", scheduler=scheduler)
    backlog = [b"m%04d" % i for i in range(2000)]
    pending = list(reversed(backlog))
    got = []

    def pump():
        while pending:
            if not tx.send(pending[-1], rx.address):
                tx.on_writable(pump)
                return
            pending.pop()

    def readable():
        got.extend(d for d, _ in rx.receive_many(4))  # a slow reader
        if len(got) == len(backlog):
            scheduler.stop()

    rx.on_readable(readable)
    scheduler.call_later(0, pump)
    scheduler.run(until=10.0)
    assert got == backlog
    assert tx.counts["again"] > 0  # the queue really did fill
    assert tx._write_mode is None  # every wait was one-shot and is gone
    tx.close()
    rx.close()
    scheduler.close()


class WriterScheduler:
    """Just enough scheduler to see how a port uses add_writer when offered."""

    def __init__(self):
        self.writers = {}
        self.readers = {}

    def add_writer(self, fileobj, callback):
        assert fileobj not in self.writers
        self.writers[fileobj] = callback

    def remove_writer(self, fileobj):
        del self.writers[fileobj]

    def add_reader(self, fileobj, callback):
        self.readers[fileobj] = callback

    def remove_reader(self, fileobj):
        self.readers.pop(fileobj, None)


def test_a_scheduler_with_add_writer_gets_the_congested_peer_watched(rundir):
    scheduler = WriterScheduler()
    with UxdPort(rundir, "tx", scheduler=scheduler) as tx, UxdPort(rundir, "rx") as rx:
        tx.on_readable(lambda: None)
        while tx.send(b"x", rx.address):
            pass
        fired = []
        tx.on_writable(lambda: fired.append(1))
        (watch, callback), = scheduler.writers.items()
        assert watch is not tx._sock and watch.getpeername() == rx.address
        assert not select.select([], [watch], [], 0)[1]
        rx.receive_many(20)
        assert select.select([], [watch], [], 1.0)[1]
        callback()
        assert fired == [1] and scheduler.writers == {}  # one-shot
        tx.on_writable(lambda: fired.append(2))
        assert list(scheduler.writers) == [watch]  # still that peer
        tx.on_writable(None)
        assert scheduler.writers == {}
        assert list(scheduler.readers) == [tx._sock]
    assert scheduler.readers == {}


def test_uxd_drops_anonymous_and_oversized_datagrams(rundir):
    with UxdPort(rundir, "rx", max_datagram=1000) as rx, UxdPort(rundir, "big", max_datagram=5000) as big:
        anon = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        anon.sendto(b"who am i", rx.address)
        anon.close()
        assert big.send(b"x" * 1001, rx.address)
        assert big.send(b"y" * 1000, rx.address)
        got = drain(rx, 1)
        assert got == [(b"y" * 1000, big.address)]
        assert rx.counts["anonymous"] == 1
        assert rx.counts["oversized"] == 1


def test_uxd_send_segments_stops_at_a_full_queue_and_reports_the_prefix(rundir):
    with UxdPort(rundir, "tx") as tx, UxdPort(rundir, "rx") as rx:
        data = os.urandom(10 * 2000)  # 2,000 datagrams: more than the queue holds
        sent = tx.send_segments(data, 10, rx.address)
        assert 0 < sent < 2000
        got = [d for d, _ in drain(rx, sent)]
        assert got == chunks(data, 10)[:sent]
        assert tx.send_segments(data[sent * 10 :], 10, rx.address) == min(2000 - sent, sent)


def test_uxd_send_to_missing_or_dead_yard_is_counted_not_raised(rundir):
    with UxdPort(rundir, "a") as a:
        assert a.send(b"x", os.path.join(rundir, "nobody"))
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        dead.bind(os.path.join(rundir, "dead"))
        dead.close()
        assert a.send(b"x", os.path.join(rundir, "dead"))
        assert a.counts["unreachable"] == 2
        with pytest.raises(ValueError):
            a.send(b"z" * (a.max_datagram + 1), os.path.join(rundir, "nobody"))
