"""Flows that wire their own router and roads, as RAET's flo plans did: two
houses, each on its own thread and scheduler, talk over a real UDP road."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from flowcast.house.house import load_house
from flowcast.routing import Route, Router
from tests.house.estates import free_udp_port


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_two_flows_wire_roads_and_route_a_share(tmp_path):
    pa, pb = free_udp_port(), free_udp_port()
    _write(tmp_path / "alpha-policy.yaml", "- {allow: write, estate: beta, share: inbox}\n")
    alpha_flo = _write(tmp_path / "alpha.flo", f"""house alpha
framer wire be active first up
  frame up
    do router setup with estate "alpha" yard "manor" policy "{tmp_path / 'alpha-policy.yaml'}" at enter
    do road setup with keep "{tmp_path / 'keep-a'}" port {pa} acceptance "always" at enter
    do queue to inbox at enter
""")
    beta_flo = _write(tmp_path / "beta.flo", f"""house beta
init .ball with value 0
framer wire be active first up
  frame up
    do router setup with estate "beta" yard "manor" at enter
    do road setup with keep "{tmp_path / 'keep-b'}" port {pb} acceptance "always" at enter
    do road join with port {pa} at enter
    go play
  frame play
    inc .ball with 1
    do route send from .ball with dst "inbox@.alpha" tag "ball" at enter
    go rest
  frame rest
    go play if .ball < 3
""")
    alpha = load_house(alpha_flo, period=0.01)
    beta = load_house(beta_flo, period=0.01)
    inbox = alpha.store.get("inbox")

    def stop_when(house, done):
        """A micro-thread of ``house``: stop it once ``done()``, looking every 10 ms, 20 s at most."""
        from flowcast.runtime import sleep

        for _ in range(2000):
            if done():
                break
            yield sleep(0.01)
        house.stop()

    alpha.scheduler.spawn(stop_when(alpha, lambda: len(inbox.queue) >= 3), name="test-stop")
    beta.scheduler.spawn(stop_when(beta, lambda: len(inbox.queue) >= 3), name="test-stop")
    runner = threading.Thread(target=alpha.run, daemon=True)  # each house owns its thread
    runner.start()
    try:
        beta.run()
    finally:
        runner.join(25)
    assert not runner.is_alive()
    assert isinstance(alpha.router, Router) and isinstance(beta.router, Router)
    assert list(alpha.router.roads) == ["main"] and alpha.router.roads["main"].closed
    got = list(inbox.queue)
    assert [m["data"]["value"] for m in got] == [1, 2, 3]
    assert Route.from_wire(got[0]["route"]["src"]) == Route("ball", "manor", "beta", "main")
    assert alpha.router.policy.counts["allowed"] == 3


def test_routing_behaviours_say_what_is_missing(tmp_path):
    flo = _write(tmp_path / "bad.flo", """house bad
framer f be active first a
  frame a
    do road setup with keep "k" at enter
""")
    house = load_house(flo, period=0.01)
    with pytest.raises(Exception, match="no router"):
        house.run(until=1.0)


class FakeHouse:
    """A house whose router records what 'route send' sends."""

    def __init__(self):
        self.sent = []
        self.router = self

    def send(self, dst, data, *, src="", tag=""):
        self.sent.append(dict(data))


def test_route_send_sends_every_update_even_two_in_one_tick():
    from flowcast.behaving import Registry
    from flowcast.behaving.registry import Io
    from flowcast.store import Store

    registry = Registry()
    registry.load_entry_points()
    store = Store(lambda: 5.0)  # frozen clock: every update has the same stamp
    share = store.share("out")
    house = FakeHouse()
    act = registry.find("route.send").target(Io(store, inputs=[share], house=house), dst="in@.beta")
    act()
    assert house.sent == []  # nothing written yet
    share.update(v=1)
    act()
    share.update(v=2)  # same stamp as v=1
    act()
    act()
    assert house.sent == [{"v": 1}, {"v": 2}]


def test_route_send_sends_an_initial_value_once_as_the_receivers_first_state():
    """A deliberate decision (issue 14, item 6): a share given a value by ``init`` before the flow runs
    is sent at the first run, once, as any change is -- the receiver should start from the sender's
    state, not wait for its next change.  A flow that wants only later changes leaves the share without
    an init (nothing is sent until something writes it: the test above)."""
    from flowcast.behaving import Registry
    from flowcast.behaving.registry import Io
    from flowcast.store import Store

    registry = Registry()
    registry.load_entry_points()
    store = Store(lambda: 0.0)
    share = store.share("out")
    share.update(value=20.0)  # what 'init .out with value 20.0' does before the first tick
    house = FakeHouse()
    act = registry.find("route.send").target(Io(store, inputs=[share], house=house), dst="in@.beta")
    act()
    act()
    assert house.sent == [{"value": 20.0}]
