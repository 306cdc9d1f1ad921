"""A ``done`` listener that sends (request/response pacing) keeps the link's books right.

Was a finding: ``pending_count -= deliver_through(...)`` read the count
before the listeners ran, so every send made from ``done`` was lost from it;
the count went negative and the idle link kept pinging as if busy.
"""

from tests.transport.roadkit import World


def test_sending_from_a_done_listener_leaves_nothing_pending_and_the_link_quiet():
    world = World(seed=1, delay=0.001)
    alpha, beta = world.pair()
    sent = []

    def next_on_delivery(msg):
        if msg.delivered and len(sent) < 20:
            sent.append(alpha.send({"n": len(sent)}, "beta"))

    alpha.hooks.add("done", next_on_delivery)
    sent.append(alpha.send({"n": 0}, "beta"))
    assert world.run_until(lambda: len(sent) == 20 and all(o.delivered for o in sent), 20)
    assert world.run_until(lambda: alpha.pending() == 0, 5)
    link = alpha.remote("beta").session.link
    assert link.pending_count == 0
    before = world.net.counts["sent"]
    world.run_for(30)
    after = world.net.counts["sent"]
    assert alpha.pending() == 0 and link.pending_count == 0
    # Idle: keep-alives only (seconds apart), not a ping per round trip.
    assert after - before < 200
