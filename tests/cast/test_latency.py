"""A live message's latency is the path's, nothing more: no batch window, cursor period or tick sits in it.

On the virtual clock the cache commits at once (the inline writer), so
what a live message waits beyond the network's delay is only what CAST's
own timers add.  The bench's real-time figure (bench/cast.py,
``cast_live_p50_us``) adds the two fsyncs and the process wake-ups; this
pins the part the design controls at zero, so a linger or a forward held
until a cursor report shows up here as a number, not as a slower bench on
a loaded machine.
"""

from __future__ import annotations

from tests.cast.kit import Cast

HOP = 0.001  # the simulated network's delay per datagram
PATH = 2 * HOP  # abc's manor -> road -> xyz's manor -> lane -> bob


def _live(tmp_path, count: int, rate: float, **conditions) -> tuple[list[float], list[bytes]]:
    cast = Cast(tmp_path, delay=HOP, **conditions)
    sub = cast.service().subscribe("abc/**", estate="abc", into="inbox")
    assert cast.run_until(lambda: sub.state == "active", 10)
    clock = cast.clock
    sent: dict[bytes, float] = {}
    arrived: dict[bytes, float] = {}
    order: list[bytes] = []

    def take(share) -> None:
        now = clock()
        for item in share.queue:
            order.append(item["data"])
            arrived.setdefault(item["data"], now)
        share.queue.clear()

    cast.queue().watchers.append(take)

    def publish(i: int) -> None:
        data = b"m%06d" % i
        sent[data] = clock()
        cast.pub.publish(f"abc/messages/alice/{i}", data, publisher="alice")

    start = clock() + 0.01
    for i in range(count):
        cast.world.scheduler.call_at(start + i / rate, publish, i)
    assert cast.run_until(lambda: len(order) >= count, 60)
    return [arrived[data] - sent[data] for data in sent], order


def test_a_live_message_at_10000_per_second_waits_only_for_the_network(tmp_path):
    latencies, order = _live(tmp_path, 3000, 10_000.0)
    assert order == [b"m%06d" % i for i in range(3000)]  # each once, in order
    # Past the window (2,000) and several cursor reports (every 500): none of them held a message back.
    assert max(latencies) <= PATH + 1e-9, (min(latencies), max(latencies))
    assert min(latencies) >= PATH - 1e-9


def test_a_burst_past_the_window_is_paced_by_cursor_reports_not_by_the_tick(tmp_path):
    # 5,000 at once: more than the window, so the rest waits for cursor reports, which come
    # every 500 delivered (a round trip each), never for the subscriber's one-second tick.
    latencies, order = _live(tmp_path, 5000, 1e9)
    assert order == [b"m%06d" % i for i in range(5000)]
    assert max(latencies) < 0.1, max(latencies)
