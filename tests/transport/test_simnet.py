"""The simulated network: faults at chosen rates, repeatably, on virtual time."""

from __future__ import annotations

import pytest

from flowcast.runtime import Event, Scheduler, VirtualClock
from flowcast.transport.ports.sim import Conditions, SimNetwork


def make(seed=1, **conditions):
    scheduler = Scheduler(VirtualClock())
    return scheduler, SimNetwork(scheduler, seed, **conditions)


def collect(port, sink):
    """Register a reader that drains ``port`` into ``sink`` with arrival times."""
    clock = port.network.scheduler.clock

    def readable():
        for data, source in port.receive_many(64):
            sink.append((clock.now(), source, data))

    port.on_readable(readable)


def numbered(count):
    return [i.to_bytes(4, "big") for i in range(count)]


def test_delivery_is_delayed_on_the_virtual_clock_and_fifo():
    scheduler, net = make(delay=(0.010, 0.050))
    a, b = net.port("a"), net.port("b")
    got = []
    collect(b, got)
    for i, data in enumerate(numbered(200)):
        scheduler.call_at(i * 0.001, a.send, data, "b")
    scheduler.run()
    assert [d for _, _, d in got] == numbered(200)  # links are FIFO
    assert all(source == "a" for _, source, _ in got)
    for i, (when, _, _) in enumerate(got):
        assert when >= i * 0.001 + 0.010 - 1e-12
    assert max(when for when, _, _ in got) <= 0.199 + 0.050 + 1e-9
    assert net.counts["delivered"] == net.counts["sent"] == 200
    assert b.counts["received"] == 200 and a.counts["sent"] == 200


def traffic(seed):
    """A two-way exchange with every fault on; returns the delivery trace."""
    scheduler = Scheduler(VirtualClock())
    net = SimNetwork(
        scheduler, seed, loss=0.1, duplicate=0.05, reorder=0.1, delay=(0.001, 0.02), corrupt=0.05, record=True
    )
    a, b = net.port("a"), net.port("b")
    seen = []

    def echo():
        for data, source in b.receive_many(16):
            seen.append(data)
            b.send(data[::-1], source)

    b.on_readable(echo)
    a.on_readable(lambda: seen.extend(d for d, _ in a.receive_many(16)))
    for i in range(500):
        scheduler.call_at(i * 0.0005, a.send, b"msg %d" % i, "b")
    scheduler.run()
    return net.trace, seen, dict(net.counts)


def test_same_seed_gives_the_same_deliveries_and_another_seed_does_not():
    first, second, third = traffic(42), traffic(42), traffic(43)
    assert first == second
    assert first[0] != third[0]
    counts = first[2]
    for event in ("lost", "duplicated", "reordered", "corrupted"):
        assert counts[event] > 0, event


def test_loss_rate_and_counts_add_up():
    scheduler, net = make(seed=7, loss=0.1, queue_limit=100_000)
    a, b = net.port("a"), net.port("b")
    for data in numbered(10_000):
        assert a.send(data, "b")
    scheduler.run()
    got = b.receive_many(20_000)
    assert 800 <= net.counts["lost"] <= 1200
    assert len(got) == net.counts["delivered"] == 10_000 - net.counts["lost"]
    assert [d for d, _ in got] == sorted(d for d, _ in got)  # loss alone never reorders


def test_duplicates_arrive_twice_and_are_counted():
    scheduler, net = make(seed=3, duplicate=0.2, delay=(0.0, 0.01), queue_limit=100_000)
    a, b = net.port("a"), net.port("b")
    for data in numbered(2000):
        a.send(data, "b")
    scheduler.run()
    got = [d for d, _ in b.receive_many(10_000)]
    extra = len(got) - len(set(got))
    assert extra == net.counts["duplicated"]
    assert 300 <= extra <= 500
    assert set(got) == set(numbered(2000))


def test_reordering_lets_later_datagrams_overtake():
    scheduler, net = make(seed=5, reorder=0.2, delay=0.001)
    a, b = net.port("a"), net.port("b")
    for i, data in enumerate(numbered(1000)):
        scheduler.call_at(i * 0.0001, a.send, data, "b")
    scheduler.run()
    got = [d for d, _ in b.receive_many(2000)]
    assert sorted(got) == numbered(1000)  # nothing lost or added
    overtaken = sum(1 for x, y in zip(got, got[1:]) if x > y)
    assert overtaken > 50
    assert 150 <= net.counts["reordered"] <= 250


def test_corruption_flips_one_to_three_bits():
    scheduler, net = make(seed=11, corrupt=0.3)
    a, b = net.port("a"), net.port("b")
    originals = [bytes([i % 256]) * 32 for i in range(1000)]
    for data in originals:
        a.send(data, "b")
    scheduler.run()
    got = [d for d, _ in b.receive_many(2000)]
    assert len(got) == 1000
    changed = 0
    for sent, received in zip(originals, got):
        bits = sum(bin(x ^ y).count("1") for x, y in zip(sent, received))
        assert len(received) == len(sent) and 0 <= bits <= 3
        changed += bits > 0
    assert changed == net.counts["corrupted"]
    assert 220 <= changed <= 380


def test_partition_cuts_both_ways_and_in_flight_then_heals():
    scheduler, net = make(delay=0.010)
    a, b, c = net.port("a"), net.port("b"), net.port("c")
    a.send(b"in flight", "b")
    scheduler.run(until=0.005)
    net.partition({"a"}, {"b"})
    scheduler.run()
    assert b.receive() is None  # lost in flight when the cut came
    a.send(b"x", "b")
    b.send(b"y", "a")
    a.send(b"to c", "c")
    scheduler.run()
    assert b.receive() is None and a.receive() is None
    assert c.receive() == (b"to c", "a")
    assert net.counts["partitioned"] == 3
    net.heal()
    a.send(b"after", "b")
    scheduler.run()
    assert b.receive() == (b"after", "a")


def test_link_overrides_one_direction_or_both():
    scheduler, net = make(seed=2)
    a, b, c = net.port("a"), net.port("b"), net.port("c")
    net.link("a", "b", loss=1.0, both=False)
    assert net.conditions("a", "b").loss == 1.0
    assert net.conditions("b", "a").loss == 0.0
    for _ in range(20):
        a.send(b"a->b", "b")
        b.send(b"b->a", "a")
        c.send(b"c->b", "b")
    scheduler.run()
    assert {d for d, _ in b.receive_many(100)} == {b"c->b"}
    assert len(a.receive_many(100)) == 20
    net.link("b", "c", delay=0.5)
    b.send(b"slow", "c")
    c.send(b"slow back", "b")
    scheduler.run()
    assert scheduler.clock.now() == pytest.approx(0.5)
    assert c.receive() == (b"slow", "b") and b.receive() == (b"slow back", "c")


def test_receive_queue_is_bounded_like_a_socket_buffer():
    scheduler, net = make(queue_limit=5)
    a, b = net.port("a"), net.port("b")
    for data in numbered(12):
        a.send(data, "b")
    scheduler.run()
    assert [d for d, _ in b.receive_many(100)] == numbered(5)
    assert net.counts["overflow"] == b.counts["overflow"] == 7
    scheduler2, net2 = make(queue_bytes=100)
    x, y = net2.port("x"), net2.port("y")
    for _ in range(5):
        x.send(b"z" * 30, "y")
    scheduler2.run()
    assert len(y.receive_many(10)) == 3 and net2.counts["overflow"] == 2


def test_readable_is_level_triggered_without_starving_threads():
    scheduler, net = make()
    a, b = net.port("a"), net.port("b")
    got = []
    calls = []

    def sip():  # reads one datagram per wake-up
        calls.append(scheduler.clock.now())
        item = b.receive()
        if item:
            got.append(item[0])

    b.on_readable(sip)
    for data in numbered(10):
        a.send(data, "b")
    scheduler.run()
    assert got == numbered(10)
    assert len(calls) == 10


def test_a_reader_thread_woken_by_the_callback_drains_everything():
    scheduler, net = make(delay=(0.0, 0.002), seed=9)
    a, b = net.port("a"), net.port("b")
    wake = Event()
    got = []

    def reader():
        while len(got) < 300:
            yield wake.wait()
            wake.clear()
            while True:
                batch = b.receive_many(32)
                got.extend(d for d, _ in batch)
                if len(batch) < 32:
                    break

    b.on_readable(wake.set)
    thread = scheduler.spawn(reader())
    for i, data in enumerate(numbered(300)):
        scheduler.call_at(i * 0.00001, a.send, data, "b")
    scheduler.run()
    assert thread.done and got == numbered(300)


def test_on_writable_fires_once_now_and_can_be_withdrawn():
    scheduler, net = make()
    port = net.port("a")
    fired = []
    scheduler.call_at(1.0, port.on_writable, lambda: fired.append(scheduler.clock.now()))
    scheduler.run()
    assert fired == [1.0]
    port.on_writable(lambda: fired.append("no"))
    port.on_writable(None)
    scheduler.run()
    assert fired == [1.0]


def test_closed_ports_and_unknown_names():
    scheduler, net = make(delay=0.01)
    a, b = net.port("a"), net.port("b")
    with pytest.raises(ValueError):
        net.port("a")
    assert a.send(b"nobody", "zed")
    a.send(b"to old b", "b")
    b.close()
    scheduler.run()
    assert net.counts["unroutable"] == 2
    with pytest.raises(OSError):
        b.send(b"x", "a")
    again = net.port("b")  # a restarted estate gets its name back
    a.send(b"to new b", "b")
    scheduler.run()
    assert again.receive() == (b"to new b", "a")


def test_bad_parameters_and_oversized_datagrams_are_refused():
    scheduler = Scheduler(VirtualClock())
    for bad in ({"loss": 1.5}, {"duplicate": -0.1}, {"delay": (0.2, 0.1)}, {"delay": -1.0}):
        with pytest.raises(ValueError):
            SimNetwork(scheduler, 0, **bad)
    with pytest.raises(ValueError):
        Conditions(reorder_window=0)
    net = SimNetwork(scheduler, 0, max_datagram=1200)
    port = net.port("a")
    assert port.max_datagram == 1200
    with pytest.raises(ValueError):
        port.send(b"x" * 1201, "b")
    with pytest.raises(ValueError):
        net.partition({"a"}, {"a", "b"})


def test_send_segments_sends_each_segment_as_its_own_datagram():
    scheduler, net = make(seed=4, loss=0.5)
    a, b = net.port("a"), net.port("b")
    data = bytes(range(250)) * 8
    assert a.send_segments(data, 300, "b") == 7
    scheduler.run()
    got = [d for d, _ in b.receive_many(10)]
    expected = [data[i : i + 300] for i in range(0, len(data), 300)]
    assert set(got) <= set(expected) and got == sorted(got, key=expected.index)
    assert net.counts["sent"] == 7 and len(got) == 7 - net.counts["lost"]
    with pytest.raises(ValueError):
        a.send_segments(data, 0, "b")
