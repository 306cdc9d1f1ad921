"""A recording whose sink fails stops whole, and names what it recorded by seed, not address.

Were (found in review): a sink that raised once removed only the ``done``
listener, so ``submitted`` went on filling ``_born`` with entries nothing
popped; and a message that failed before entering a link was recorded under
``id(msg)``, so a simulated run's trace changed from run to run.
"""

from flowcast.transport.keep import RemoteRecord, Status
from tests.transport.roadkit import World


class Sink:
    def __init__(self, fail_on: str = "") -> None:
        self.fail_on = fail_on
        self.events: list[tuple] = []

    def message(self, kind, msg_id, src, dst, size, latency=None, **detail):
        if kind == self.fail_on:
            self.fail_on = ""
            raise OSError("disk full")
        self.events.append((kind, msg_id))

    def presence(self, name, state):
        pass


def test_a_sink_that_raises_stops_the_whole_recording_and_holds_nothing():
    world = World(seed=1, delay=0.001)
    alpha, beta = world.pair()
    alpha.set_events(Sink(fail_on="acknowledged"))
    outs = [alpha.send({"n": i}, "beta") for i in range(50)]
    assert world.run_until(lambda: all(o.delivered for o in outs), 10)
    assert alpha.counts["recording_failed"] == 1 and alpha.event_sink is None
    assert not alpha._born and alpha.hooks.submitted is None and alpha.hooks.done is None
    later = alpha.send({"n": 50}, "beta")
    assert world.run_until(lambda: later.delivered, 5) and not alpha._born


def test_messages_that_never_reach_a_link_are_named_the_same_in_every_run():
    def run() -> list[tuple]:
        world = World(seed=2, delay=0.001)
        alpha, beta = world.estate("alpha"), world.estate("beta")
        world.net.partition(["alpha"], ["beta"])  # no session ever: messages fail in the backlog
        alpha.add_remote(RemoteRecord("beta", "beta", 0, beta.keys.verkey, beta.keys.pubkey, Status.ACCEPTED), "beta")
        sink = Sink()
        alpha.set_events(sink)
        outs = [alpha.send({"n": n}, "beta", timeout=0.5) for n in range(3)]
        assert world.run_until(lambda: all(o.failed for o in outs), 5)
        assert not any(f"{id(o):x}" in msg_id for o in outs for _, msg_id in sink.events)  # not by address
        return sink.events

    first, second = run(), run()
    assert [kind for kind, _ in first] == ["denied"] * 3
    assert first == second
