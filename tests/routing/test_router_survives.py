"""A router survives the code it calls: flows' share watchers that raise.

The router listens on its stacks' hooks, and a hook removes a listener that
raises.  Were: a presence watcher that raised once unhooked the router's
presence listener (held messages then expired as ``no_remote`` though the
estate had joined), and a value share's watcher that raised unhooked the
router's message listener (the house went deaf).  Found in review.
"""

from flowcast.routing import presence_share
from tests.routing.kit import World

ALPHA = [{"allow": "write", "estate": "beta"}]
BETA = [{"allow": "write", "estate": "alpha", "share": "public.*"}]


def _once(error):
    calls = []

    def watcher(share):
        calls.append(1)
        if len(calls) == 1:
            raise error

    return watcher, calls


def test_a_presence_watcher_that_raises_does_not_keep_held_messages_from_a_joined_estate():
    world = World(seed=5)
    alpha = world.routed_estate("alpha", ["manor"], policy=ALPHA)
    beta = world.routed_estate("beta", ["manor"], policy=BETA)
    board = beta.store("manor").queue("public.board")
    watcher, calls = _once(KeyError("a flow's bug"))
    alpha.store("manor").share(presence_share("main")).watchers.append(watcher)
    alpha["manor"].send("public.board@.beta", {"early": 1}, src="out", tag="post")
    assert world.run_until(lambda: alpha["manor"].counts["held"] == 1, 2)
    alpha.roads["main"].join("beta:main")
    assert world.run_until(lambda: len(board.queue) == 1, 10), dict(alpha["manor"].counts)
    assert calls and alpha["manor"].counts["released"] == 1 and alpha["manor"].counts["failed"] == 1
    assert alpha["manor"].counts["no_remote"] == 0
    # The router still hears presence: the share follows the next change.
    assert alpha.store("manor").get(presence_share("main")).get("beta") is not None


def test_a_value_watcher_that_raises_does_not_leave_the_house_deaf():
    world = World(seed=6)
    alpha = world.routed_estate("alpha", ["manor"], policy=ALPHA)
    beta = world.routed_estate("beta", ["manor"], policy=BETA)
    world.connect(alpha, beta)
    board = beta.store("manor").share("public.board")
    watcher, calls = _once(RuntimeError("a flow's bug"))
    board.watchers.append(watcher)
    alpha["manor"].send("public.board@.beta", {"n": 1}, src="out")
    assert world.run_until(lambda: len(calls) == 1, 5)
    alpha["manor"].send("public.board@.beta", {"n": 2}, src="out")
    assert world.run_until(lambda: board.fields() == {"n": 2}, 5)
    assert beta["manor"].counts["update_failed"] == 1 and len(calls) == 2
