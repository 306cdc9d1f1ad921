"""RoadStack over real loopback UDP, run as micro-threads of a real-clock scheduler."""

from __future__ import annotations

from flowcast.runtime import RealClock, Scheduler
from flowcast.transport.keep import Keep
from flowcast.transport.ports import UdpPort
from flowcast.transport.road import RoadStack


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
